#include "train/checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/file_checks.h"
#include "train/checkpoint/shard_reader.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

constexpr const char* kTmpSuffix = ".tmp";

// Names a save writes into a step directory: rank_RRRRR.bin and the manifest.
bool is_checkpoint_entry(const fs::directory_entry& e) {
  const std::string n = e.path().filename().string();
  if (!e.is_regular_file()) return false;
  if (n == kManifestFile || n.starts_with(std::string(kManifestFile) + ".tmp-")) return true;
  return n.starts_with("rank_") && n.ends_with(".bin");
}

bool holds_only_checkpoint_files(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (!is_checkpoint_entry(e)) return false;
  return !ec;
}

// A manifest of ours: the format tag is in its first bytes.
bool has_meshtrain_manifest(const fs::path& dir) {
  std::ifstream in(dir / kManifestFile);
  std::string head(256, '\0');
  in.read(head.data(), std::streamsize(head.size()));
  return head.find("\"meshtrain-sharded\"") != std::string::npos;
}

}  // namespace

std::string step_dir_name(int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06d", step);
  return buf;
}

int parse_step_dir_name(const std::string& name, bool* tmp) {
  const std::string prefix = "step_";
  if (!name.starts_with(prefix)) return -1;
  std::string digits = name.substr(prefix.size());
  *tmp = digits.ends_with(kTmpSuffix);
  if (*tmp) digits.resize(digits.size() - std::string(kTmpSuffix).size());
  if (digits.size() < 6 || digits.size() > 9) return -1;
  for (char c : digits)
    if (c < '0' || c > '9') return -1;
  return std::stoi(digits);
}

bool is_sharded_checkpoint(const std::string& dir) {
  return file_id(dir + "/" + kManifestFile).has_value();
}

ShardedVerification verify_sharded_checkpoint(const std::string& dir) {
  require_input_dir("checkpoint", dir);
  bool tmp = false;
  const std::string name = fs::path(strip_trailing_slashes(dir)).filename().string();
  MT_REQUIRE(!(parse_step_dir_name(name, &tmp) >= 0 && tmp), dir,
             " is a save still under its temporary name (unfinished or interrupted): it is "
             "never loaded; load a complete step_NNNNNN directory");
  ShardedVerification v;
  v.manifest = read_manifest(dir);
  v.bytes_verified = verify_shards(dir, v.manifest);
  return v;
}

std::vector<std::string> complete_checkpoints(const std::string& root) {
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    bool tmp = false;
    const int step = parse_step_dir_name(e.path().filename().string(), &tmp);
    if (step >= 0 && !tmp && e.is_directory()) found.push_back({step, e.path().string()});
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string newest_valid_checkpoint(const std::string& root,
                                    const std::function<void(const std::string&)>& warn) {
  for (const std::string& dir : complete_checkpoints(root)) {
    try {
      verify_sharded_checkpoint(dir);
      return dir;
    } catch (const std::exception& e) {
      warn(str("skipping ", dir, ": ", e.what()));
    }
  }
  return "";
}

std::vector<std::string> prune_checkpoints(const std::string& root, int keep) {
  MT_CHECK(keep >= 1, "keep ", keep);
  std::vector<std::string> deleted;
  int kept = 0;
  for (const std::string& dir : complete_checkpoints(root)) {
    if (!has_meshtrain_manifest(dir) || !holds_only_checkpoint_files(dir)) continue;
    if (kept < keep) {
      ++kept;
      continue;
    }
    const std::string doomed = dir + kTmpSuffix;
    std::error_code ec;
    fs::remove_all(doomed, ec);
    fs::rename(dir, doomed, ec);
    if (ec) throw RuntimeError(str("cannot prune ", dir, ": ", ec.message()));
    fs::remove_all(doomed, ec);
    if (ec) throw RuntimeError(str("cannot delete ", doomed, ": ", ec.message()));
    deleted.push_back(dir);
  }
  return deleted;
}

std::vector<std::string> remove_interrupted_saves(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    bool tmp = false;
    if (parse_step_dir_name(e.path().filename().string(), &tmp) < 0 || !tmp || !e.is_directory())
      continue;
    if (!holds_only_checkpoint_files(e.path())) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) removed.push_back(e.path().string());
  }
  return removed;
}

}  // namespace mt
