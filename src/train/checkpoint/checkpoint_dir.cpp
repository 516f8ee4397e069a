#include "train/checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/input_file.h"
#include "core/temp_marker.h"
#include "train/checkpoint/checkpoint_contents.h"
#include "train/checkpoint/shard_reader.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

constexpr const char* kTmpSuffix = ".tmp";

// Names a save writes into a step directory: rank_RRRRR.bin and the manifest (and, for a
// moment, the marker of its temporary name: core/temp_marker.h).
bool is_checkpoint_entry(const fs::directory_entry& e) {
  const std::string n = e.path().filename().string();
  std::error_code ec;
  if (!e.is_regular_file(ec)) return false;
  if (n == kManifestFile || n.starts_with(std::string(kManifestFile) + ".tmp-")) return true;
  if (n == kTempMarkerFile) return true;
  return n.starts_with("rank_") && n.ends_with(".bin");
}

// A manifest of ours: JSON carrying our format tag (its keys are written sorted, so the tag
// is not at the start). Read without blocking: a FIFO named manifest.json is not ours and
// must not hang the run.
bool has_meshtrain_manifest(const fs::path& dir) {
  try {
    const nlohmann::json j = nlohmann::json::parse(
        read_input_file("checkpoint", (dir / kManifestFile).string(), kMaxJsonInputBytes));
    return j.is_object() && j.value("format", "") == kShardedFormatName;
  } catch (const std::exception&) {
    return false;
  }
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
  check_manifest_contents(v.manifest, str(dir, "/", kManifestFile));
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

bool holds_only_checkpoint_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return false;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (!is_checkpoint_entry(e)) return false;
  return !ec;
}

bool is_meshtrain_checkpoint_dir(const std::string& dir) {
  return has_meshtrain_manifest(dir) && holds_only_checkpoint_files(dir);
}

void prepare_step_temp(const std::string& tmp) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(tmp, ec)) && !remove_if_marked_temporary(tmp))
    throw RuntimeError(str("not saving: ", tmp,
                           " exists and is not a temporary of meshtrain's (it has no marker); "
                           "move it out of the --save directory"));
  create_marked_dir(tmp);
}

void discard_step_dir(const std::string& dir) {
  const std::string doomed = dir + kTmpSuffix;
  std::error_code ec;
  if (fs::exists(fs::symlink_status(doomed, ec)) && !remove_if_marked_temporary(doomed))
    throw RuntimeError(str("cannot delete ", dir, ": ", doomed,
                           " is in the way and is not a temporary of meshtrain's"));
  // Marked first: a crash after the rename leaves a temporary the next run may remove.
  mark_temporary(dir, fs::path(doomed).filename().string());
  fs::rename(dir, doomed, ec);
  if (ec) {
    unmark_temporary(dir);
    throw RuntimeError(str("cannot delete ", dir, ": ", ec.message()));
  }
  fs::remove_all(doomed, ec);
  if (ec) throw RuntimeError(str("cannot delete ", doomed, ": ", ec.message()));
}

std::vector<std::string> remove_interrupted_saves(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    bool tmp = false;
    if (parse_step_dir_name(e.path().filename().string(), &tmp) < 0 || !tmp) continue;
    // The name is no proof: only our marker is (a user's step_000001.tmp/ stays).
    if (remove_if_marked_temporary(e.path().string())) removed.push_back(e.path().string());
  }
  return removed;
}

}  // namespace mt
