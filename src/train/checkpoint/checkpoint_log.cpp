#include "train/checkpoint/checkpoint_log.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/input_file.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/metadata_checksum.h"

namespace mt {

namespace {

using json = nlohmann::json;

constexpr const char* kLogFormat = "meshtrain-checkpoint-log";
constexpr int kLogVersion = 1;

bool is_int_in(const json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(hi);
  return v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
}

CheckpointLogEntry parse_entry(const json& e, const std::string& path) {
  MT_REQUIRE(e.is_object() && e.contains("dir") && e["dir"].is_string() && e.contains("run") &&
                 e["run"].is_string() && e.contains("manifest_crc32c") &&
                 e["manifest_crc32c"].is_string() && e.contains("step") &&
                 is_int_in(e["step"], 0, INT_MAX) && e.contains("seq") &&
                 is_int_in(e["seq"], 1, INT64_MAX - 1),
             path, ": an entry needs \"dir\", \"step\", \"run\", \"seq\" and \"manifest_crc32c\"");
  CheckpointLogEntry out{e["dir"].get<std::string>(), e["step"].get<int>(),
                         e["run"].get<std::string>(), e["seq"].get<int64_t>(),
                         e["manifest_crc32c"].get<std::string>()};
  bool tmp = false;
  MT_REQUIRE(parse_step_dir_name(out.dir, &tmp) == out.step && !tmp, path, ": entry \"", out.dir,
             "\" is not the step folder of step ", out.step);
  return out;
}

}  // namespace

CheckpointLog CheckpointLog::read(const std::string& root, std::string* damage) {
  CheckpointLog log;
  const std::string path = root + "/" + kCheckpointLogFile;
  if (!file_id(path).has_value()) return log;
  try {
    const json j = json::parse(read_input_file("checkpoint log", path, kMaxJsonInputBytes));
    MT_REQUIRE(j.is_object() && j.value("format", "") == kLogFormat, path,
               " is not a meshtrain checkpoint log");
    MT_REQUIRE(check_json_seal(j, path), path, " has no checksum");
    MT_REQUIRE(j.value("format_version", 0) == kLogVersion, path, ": unsupported format_version");
    MT_REQUIRE(j.contains("next_seq") && is_int_in(j["next_seq"], 1, INT64_MAX - 1) &&
                   j.contains("checkpoints") && j["checkpoints"].is_array(),
               path, ": needs \"next_seq\" and \"checkpoints\"");
    log.next_seq_ = j["next_seq"].get<int64_t>();
    for (const json& e : j["checkpoints"]) {
      log.entries_.push_back(parse_entry(e, path));
      MT_REQUIRE(log.entries_.back().seq < log.next_seq_, path,
                 ": an entry's seq is not below "
                 "next_seq");
    }
  } catch (const std::exception& e) {
    *damage = e.what();
    return CheckpointLog{};
  }
  return log;
}

const CheckpointLogEntry* CheckpointLog::find(const std::string& dir) const {
  for (const CheckpointLogEntry& e : entries_)
    if (e.dir == dir) return &e;
  return nullptr;
}

void CheckpointLog::add(const std::string& dir, int step, const std::string& run,
                        const std::string& manifest_crc32c) {
  remove(dir);
  entries_.push_back({dir, step, run, next_seq_++, manifest_crc32c});
}

void CheckpointLog::remove(const std::string& dir) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const CheckpointLogEntry& e) { return e.dir == dir; }),
                 entries_.end());
}

void CheckpointLog::write(const std::string& root) const {
  json list = json::array();
  for (const CheckpointLogEntry& e : entries_)
    list.push_back({{"dir", e.dir},
                    {"step", e.step},
                    {"run", e.run},
                    {"seq", e.seq},
                    {"manifest_crc32c", e.manifest_crc32c}});
  json j = {{"format", kLogFormat},
            {"format_version", kLogVersion},
            {"next_seq", next_seq_},
            {"checkpoints", list}};
  seal_json(j);
  write_file_atomic(root + "/" + kCheckpointLogFile, j.dump(1) + "\n");
}

std::string new_run_id() {
  std::random_device rd;
  const uint64_t t = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t id = (uint64_t(rd()) << 32 ^ rd()) ^ (t * 0x9E3779B97F4A7C15ull);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

}  // namespace mt
