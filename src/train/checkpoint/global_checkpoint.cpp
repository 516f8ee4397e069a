#include "train/checkpoint/global_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <vector>

#include "core/atomic_file.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/input_file.h"
#include "core/temp_marker.h"
#include "train/checkpoint/checkpoint_contents.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/metadata_checksum.h"
#include "train/global_view.h"
#include "train/safetensors.h"

namespace mt {

namespace {

constexpr int kFormatVersion = 1;
constexpr const char* kStateFile = "state.json";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
// Every entry a checkpoint directory may hold. A save replaces the directory whole, so a
// directory holding anything else is not ours to replace (docs/checkpoints.md).
const std::set<std::string>& checkpoint_entries() {
  // The marker: inert in a published checkpoint (core/temp_marker.h), left by a crash
  // between the publishing rename and its removal.
  static const std::set<std::string> names = {kStateFile, kModelFile, kOptimizerFile,
                                              kTempMarkerFile};
  return names;
}

// Reads an integer field of state.json and checks its range: nlohmann's get<int>() would
// wrap 4294967301 to 5 without a word.
int64_t state_int(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi,
                  const std::string& where) {
  MT_REQUIRE(j.contains(key), where, ": state.json has no \"", key, "\"");
  const nlohmann::json& v = j.at(key);
  MT_REQUIRE(v.is_number_integer(), where, ": state.json \"", key, "\" is ", v.dump(),
             ", not an integer");
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(hi)
                                               : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  MT_REQUIRE(in_range, where, ": state.json \"", key, "\" is ", v.dump(), ", outside ", lo, "..",
             hi);
  return v.is_number_unsigned() ? int64_t(v.get<uint64_t>()) : v.get<int64_t>();
}

// What to say when DIR has no state.json: a --save root of sharded checkpoints is the
// usual mistake, and the user needs the step folder or --resume auto, not "missing".
std::string missing_state_advice(const std::string& dir) {
  const std::vector<std::string> steps = complete_checkpoints(dir);
  if (steps.empty()) return "is missing (not a meshtrain checkpoint directory?)";
  return str("is missing: ", dir, " is a directory of sharded checkpoints (the newest is ",
             steps.front(), "), not one checkpoint; give a step folder (--load ", steps.front(),
             ") or resume from the newest valid one with --save ", dir,
             " --resume auto --checkpoint-format sharded");
}

nlohmann::json read_state_json(const std::string& dir, const std::string& flag) {
  const std::string where = flag + " " + dir;
  const std::string path = dir + "/" + kStateFile;
  MT_REQUIRE(file_id(path).has_value(), where, ": ", path, " ", missing_state_advice(dir));
  const std::string text = read_input_file(where + ":", path, kMaxJsonInputBytes);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw UsageError(str(where, ": state.json is not valid JSON (", e.what(), ")"));
  }
  MT_REQUIRE(j.is_object(), where, ": state.json is not a JSON object");
  // A flipped bit in "step" would resume at the wrong step with every tensor file intact.
  MT_REQUIRE(check_json_seal(j, path), where, ": ", path,
             " has no checksum: it was written by a meshtrain from before checkpoint metadata "
             "was checksummed, so its step and data position cannot be verified and it is not "
             "loaded; its weights can still start a run: --init-from ",
             dir, "/", kModelFile, " (docs/checkpoints.md)");
  return j;
}

// Size and CRC-32C of a whole file, read in large pieces (fed to `scan` as they are read).
FileDigest digest_file(const std::string& path, NonFiniteScan* scan = nullptr) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw UsageError(str(path, ": cannot open (", std::strerror(errno), ")"));
  std::vector<char> buf(size_t(4) << 20);
  FileDigest d;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw RuntimeError(str(path, ": cannot read (", std::strerror(err), ")"));
    }
    if (n == 0) break;
    d.crc32c = crc32c_update(d.crc32c, buf.data(), size_t(n));
    if (scan) scan->feed(buf.data(), size_t(n), d.bytes);
    d.bytes += uint64_t(n);
  }
  ::close(fd);
  return d;
}

// Where a safetensors file's tensor bytes start: after its 8-byte header length and the
// header. UINT64_MAX (nothing to scan) for a file too short to say; its size check fails.
uint64_t safetensors_data_start(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char le[8] = {};
  if (!in.read(reinterpret_cast<char*>(le), 8)) return UINT64_MAX;
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | le[i];
  return header > UINT64_MAX - 8 ? UINT64_MAX : 8 + header;
}

nlohmann::json manifest_entry(const FileDigest& d) {
  return {{"bytes", d.bytes}, {"crc32c", crc32c_hex(d.crc32c)}};
}

}  // namespace

namespace {

void publish(const std::string& dir, const ParamTable& table, const ModelConfig& cfg,
             const GlobalTensors& params, const GlobalTensors& exp_avg,
             const GlobalTensors& exp_avg_sq, const TrainState& state,
             const std::vector<NamedTensor>& optimizer_extra,
             const std::map<std::string, std::string>& extra_metadata) {
  publish_dir_atomic(dir, [&](const std::string& tmp) {
    // The tokenizer record (and its embedded model, up to megabytes) goes in the model file
    // only: that is the file sample and export read it from. Checkpoints written before
    // carry it in the optimizer file too, which no reader looks at.
    auto meta = config_metadata(cfg);
    meta.insert(extra_metadata.begin(), extra_metadata.end());
    std::vector<std::string> n0, n1, n2;
    const FileDigest model =
        write_safetensors(tmp + "/" + kModelFile, global_tensors(table, params, "", n0), meta);
    // The optimizer file holds both moments under suffixed names.
    auto t1 = global_tensors(table, exp_avg, ".exp_avg", n1);
    auto t2 = global_tensors(table, exp_avg_sq, ".exp_avg_sq", n2);
    t1.insert(t1.end(), t2.begin(), t2.end());
    for (const NamedTensor& e : optimizer_extra)
      t1.push_back({e.name, {int64_t(e.data.size())}, e.data.data()});
    const FileDigest optimizer =
        write_safetensors(tmp + "/" + kOptimizerFile, t1, config_metadata(cfg));
    // The manifest: a load verifies every byte of both files against it before trusting them.
    nlohmann::json j = {
        {"format_version", kFormatVersion},
        {"step", state.step},
        {"data_position", state.data_position},
        {"seed", state.seed},
        {"model", config_metadata(cfg)},
        {"files",
         {{kModelFile, manifest_entry(model)}, {kOptimizerFile, manifest_entry(optimizer)}}}};
    if (!state.run.is_null()) j["run"] = state.run;
    seal_json(j);
    write_file_atomic(tmp + "/" + kStateFile, j.dump(2) + "\n");
  });
}

}  // namespace

void save_checkpoint(const std::string& dir, const ParamTable& table, const ModelConfig& cfg,
                     const GlobalTensors& params, const GlobalTensors& exp_avg,
                     const GlobalTensors& exp_avg_sq, const TrainState& state,
                     const std::vector<NamedTensor>& optimizer_extra,
                     const std::map<std::string, std::string>& extra_metadata) {
  // A save replaces the directory whole: re-check, at the moment of replacing it, that
  // nothing but a checkpoint is there (the run checked at its start; a user may have put a
  // file there since).
  const std::string conflict = checkpoint_dir_conflict(dir);
  if (!conflict.empty())
    throw RuntimeError(str("not saving the checkpoint of step ", state.step, ": ", conflict));
  try {
    publish(dir, table, cfg, params, exp_avg, exp_avg_sq, state, optimizer_extra, extra_metadata);
  } catch (const RuntimeError& e) {
    // Name the checkpoint rather than the temporary the failure happened in.
    throw RuntimeError(str("the checkpoint of step ", state.step, " was not saved to ", dir,
                           " (the one there is intact): ", e.what()));
  }
}

namespace {

TrainState parse_train_state(const nlohmann::json& j, const std::string& where) {
  const int64_t version = state_int(j, "format_version", 0, INT_MAX, where);
  MT_REQUIRE(version == kFormatVersion, where, ": unsupported checkpoint format_version ", version,
             " (this meshtrain reads ", kFormatVersion, ")");
  TrainState s;
  s.step = int(state_int(j, "step", 0, INT_MAX, where));
  s.data_position = state_int(j, "data_position", 0, INT64_MAX, where);
  MT_REQUIRE(j.contains("seed") && j["seed"].is_number_unsigned(), where,
             ": state.json \"seed\" is missing or not a non-negative integer");
  s.seed = j["seed"].get<uint64_t>();
  if (j.contains("run")) {
    MT_REQUIRE(j["run"].is_object(), where, ": state.json \"run\" is not an object");
    s.run = j["run"];
  }
  return s;
}

}  // namespace

TrainState read_train_state(const std::string& dir, const std::string& flag) {
  return parse_train_state(read_state_json(dir, flag), flag + " " + dir);
}

CheckpointVerification verify_checkpoint(const std::string& dir, const std::string& flag) {
  const std::string where = flag + " " + dir;
  require_input_dir(flag, dir);
  const nlohmann::json j = read_state_json(dir, flag);
  parse_train_state(j, where);
  CheckpointVerification out;
  MT_REQUIRE(j.contains("files") && j["files"].is_object(), where,
             ": state.json has no \"files\" checksums");
  const nlohmann::json& files = j["files"];
  std::vector<std::pair<std::string, NonFiniteScan>> non_finite;  // named once the headers pass
  for (const char* name : {kModelFile, kOptimizerFile}) {
    const std::string path = dir + "/" + name;
    require_input_file(where + ":", path);
    MT_REQUIRE(files.contains(name) && files[name].is_object(), where,
               ": state.json lists no checksum for ", name);
    const nlohmann::json& e = files[name];
    MT_REQUIRE(e.contains("bytes") && e["bytes"].is_number_unsigned() && e.contains("crc32c") &&
                   e["crc32c"].is_string(),
               where, ": state.json's entry for ", name, " needs \"bytes\" and \"crc32c\"");
    NonFiniteScan scan(safetensors_data_start(path));
    const FileDigest d = digest_file(path, &scan);
    MT_REQUIRE(d.bytes == e["bytes"].get<uint64_t>(), where, ": ", name, " is ", d.bytes,
               " bytes but the checkpoint recorded ", e["bytes"].get<uint64_t>(),
               " (truncated or replaced); resume from another checkpoint");
    MT_REQUIRE(crc32c_hex(d.crc32c) == e["crc32c"].get<std::string>(), where, ": ", name,
               " fails its checksum (crc32c ", crc32c_hex(d.crc32c), ", recorded ",
               e["crc32c"].get<std::string>(),
               "): the file is damaged; resume from another checkpoint");
    out.bytes_verified += d.bytes;
    if (scan.found()) non_finite.push_back({path, scan});
  }
  // The bytes are the ones written; are they whole?
  out.unchecked = check_global_contents(dir, j, where);
  for (const auto& [path, scan] : non_finite)
    refuse_non_finite(path, safetensors_data_start(path), *scan.found());
  out.verified = true;
  return out;
}

std::string checkpoint_dir_conflict(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";  // nothing there (or not a directory: checked apart)
  std::vector<std::string> foreign;
  bool has_state = false, empty = true;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    empty = false;
    const std::string name = e.path().filename().string();
    if (name == kStateFile) has_state = true;
    if (!checkpoint_entries().count(name) || !e.is_regular_file()) foreign.push_back(name);
  }
  if (ec) return str(dir, " cannot be listed (", ec.message(), ")");
  if (empty) return "";
  std::sort(foreign.begin(), foreign.end());
  if (foreign.empty() && has_state) return "";
  std::string what;
  for (size_t i = 0; i < foreign.size() && i < 3; ++i) what += (i ? ", " : "") + foreign[i];
  if (foreign.size() > 3) what += str(" and ", foreign.size() - 3, " more");
  if (foreign.empty()) what = "checkpoint files without state.json";
  return str(dir, " holds ", what,
             ", not a meshtrain checkpoint; a save replaces the whole directory, so give an "
             "empty or new directory (or a checkpoint directory)");
}

TrainState load_checkpoint(const std::string& dir, const ParamTable& table, const GlobalState& g) {
  const TrainState s = read_train_state(dir);
  SafetensorsFile weights(dir + "/" + kModelFile);
  read_local_elements(weights, table, g.params, "");
  SafetensorsFile moments(dir + "/" + kOptimizerFile);
  read_local_elements(moments, table, g.exp_avg, ".exp_avg");
  read_local_elements(moments, table, g.exp_avg_sq, ".exp_avg_sq");
  return s;
}

bool read_router_bias(const std::string& dir, const std::string& name, std::vector<float>& bias) {
  const SafetensorsFile f(dir + "/" + kOptimizerFile);
  if (!f.contains(name)) return false;
  f.expect_shape(name, {int64_t(bias.size())});
  f.read(name, bias.data(), bias.size());
  return true;
}

void load_router_biases(const std::string& dir, const ParamTable& table,
                        const std::vector<MoeLayer*>& moe) {
  if (moe.empty()) return;
  const std::vector<std::string> names = router_bias_names(table);
  MT_CHECK(names.size() == moe.size(), "the table holds ", names.size(), " routers for ",
           moe.size(), " MoE layers");
  for (size_t i = 0; i < names.size(); ++i) read_router_bias(dir, names[i], moe[i]->router_bias());
}

}  // namespace mt
