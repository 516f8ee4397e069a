#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <system_error>
#include <vector>

#include "core/atomic_file.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "kernels/reduce.h"
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
  static const std::set<std::string> names = {kStateFile, kModelFile, kOptimizerFile};
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

nlohmann::json read_state_json(const std::string& dir) {
  const std::string where = "--load " + dir;
  const std::string path = dir + "/" + kStateFile;
  MT_REQUIRE(file_id(path).has_value(), where, ": ", path,
             " is missing (not a meshtrain checkpoint directory?)");
  require_input_file(where + ":", path);
  std::ifstream in(path);
  MT_REQUIRE(in.good(), where, ": cannot read ", path);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw UsageError(str(where, ": state.json is not valid JSON (", e.what(), ")"));
  }
  MT_REQUIRE(j.is_object(), where, ": state.json is not a JSON object");
  return j;
}

// Size and CRC-32C of a whole file, read in large pieces.
FileDigest digest_file(const std::string& path) {
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
    d.bytes += uint64_t(n);
  }
  ::close(fd);
  return d;
}

nlohmann::json manifest_entry(const FileDigest& d) {
  return {{"bytes", d.bytes}, {"crc32c", crc32c_hex(d.crc32c)}};
}

// Shortest text that reads back as the same float.
std::string float_str(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  MT_CHECK(r.ec == std::errc(), "cannot format ", v);
  return std::string(buf, r.ptr);
}

std::map<std::string, std::string> config_metadata(const ModelConfig& c) {
  std::map<std::string, std::string> m = {
      {"format", "meshtrain"},        {"layers", std::to_string(c.layers)},
      {"dim", std::to_string(c.dim)}, {"heads", std::to_string(c.heads)},
      {"seq", std::to_string(c.seq)}, {"vocab", std::to_string(c.vocab)}};
  if (c.experts > 0) {
    // The tensors give the experts and the MoE blocks; top-k and the capacity factor (its
    // drops apply whenever the layer runs, sampling included) only live here.
    m["experts"] = std::to_string(c.experts);
    m["topk"] = std::to_string(c.topk);
    m["moe_every"] = std::to_string(c.moe_every);
    m["capacity_factor"] = float_str(c.capacity_factor);
  }
  return m;
}

// Metadata value `key` of `f` as a positive int; nullopt when absent.
std::optional<int> metadata_int(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  if (it == f.metadata().end()) return std::nullopt;
  const std::string& v = it->second;
  int n = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
  MT_REQUIRE(r.ec == std::errc() && r.ptr == v.data() + v.size() && n > 0, f.path(),
             ": metadata \"", key, "\" is \"", v, "\", not a positive integer");
  return n;
}

// Metadata value `key` of `f` as a finite float >= 0; nullopt when absent.
std::optional<float> metadata_float(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  if (it == f.metadata().end()) return std::nullopt;
  const std::string& v = it->second;
  float x = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  MT_REQUIRE(r.ec == std::errc() && r.ptr == v.data() + v.size() && std::isfinite(x) && x >= 0,
             f.path(), ": metadata \"", key, "\" is \"", v, "\", not a number >= 0");
  return x;
}

// "transformer.h.{i}.mlp.router.weight" and friends.
std::string block_tensor(int i, const std::string& rest) {
  return "transformer.h." + std::to_string(i) + "." + rest;
}
std::string expert_tensor(int i, int e) {
  return block_tensor(i, "mlp.experts." + std::to_string(e) + ".c_fc.weight");
}

// The global tensors under their global names plus `suffix`.
std::vector<SafetensorsTensor> global_tensors(const ParamTable& table, const GlobalTensors& g,
                                              const std::string& suffix,
                                              std::vector<std::string>& names) {
  MT_CHECK(g.size() == table.entries().size(), "global view of ", g.size(),
           " tensors for a table of ", table.entries().size());
  names.clear();
  for (const ParamInfo& p : table.entries()) names.push_back(p.name + suffix);
  std::vector<SafetensorsTensor> out;
  size_t i = 0;
  for (const ParamInfo& p : table.entries()) {
    MT_CHECK(int64_t(g[i].size()) == p.global_numel(), p.name, ": global view has the wrong size");
    out.push_back({names[i], p.global_shape, g[i].data()});
    ++i;
  }
  return out;
}

FileDigest write_arena(const std::string& path, const ParamTable& table, const GlobalTensors& g,
                       const std::string& suffix, const std::map<std::string, std::string>& meta) {
  std::vector<std::string> names;
  auto tensors = global_tensors(table, g, suffix, names);
  return write_safetensors(path, tensors, meta);
}

// Fills this rank's local elements of every tensor from the file's global tensors.
void read_arena(const SafetensorsFile& f, const ParamTable& table, float* arena,
                const std::string& suffix) {
  std::vector<float> global;
  for (const ParamInfo& p : table.entries()) {
    const std::string name = p.name + suffix;
    f.expect_shape(name, p.global_shape);
    global.resize(size_t(p.global_numel()));
    f.read(name, global.data(), global.size());
    // NaN or Inf would otherwise surface steps later as a "divergence" (or as garbage text
    // from sample): name the file and tensor now.
    MT_REQUIRE(all_finite(global.data(), global.size()), f.path(), ": tensor ", name,
               " holds NaN or Inf values; the file is damaged or the run that wrote it diverged");
    float* dst = arena + p.offset;
    p.for_each_element([&](size_t l, int64_t g) { dst[l] = global[size_t(g)]; });
  }
}

}  // namespace

GlobalTensors assemble_global(const ParamTable& table, const float* arena, Communicator* tp) {
  const bool split = tp != nullptr && tp->size() > 1;
  GlobalTensors out;
  std::vector<float> packed;  // the split tensors, one after the other, for one all-reduce
  for (const ParamInfo& p : table.entries()) {
    out.emplace_back(size_t(p.global_numel()), 0.f);
    std::vector<float>& g = out.back();
    const float* src = arena + p.offset;
    if (p.shard.replicated()) {
      std::copy(src, src + p.numel, g.begin());
      continue;
    }
    MT_CHECK(split, p.name, " is split over tensor parallelism: assembling it needs the tp group");
    const size_t base = packed.size();
    packed.resize(base + g.size(), 0.f);
    p.for_each_element([&](size_t l, int64_t e) { packed[base + size_t(e)] = src[l]; });
  }
  if (packed.empty()) return out;
  tp->all_reduce(packed.data(), packed.data(), packed.size(), DType::f32, ReduceOp::sum).wait();
  size_t off = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (table.entries()[i].shard.replicated()) continue;
    std::copy(packed.begin() + long(off), packed.begin() + long(off + out[i].size()),
              out[i].begin());
    off += out[i].size();
  }
  return out;
}

ModelConfig model_config_from_file(const std::string& path, const ModelConfig& base) {
  SafetensorsFile f(path);
  ModelConfig c = base;
  const auto& wte = f.tensor("transformer.wte.weight").shape;
  const auto& wpe = f.tensor("transformer.wpe.weight").shape;
  MT_REQUIRE(wte.size() == 2 && wpe.size() == 2 && wte[1] == wpe[1], path,
             ": transformer.wte.weight ", shape_str(wte), " and transformer.wpe.weight ",
             shape_str(wpe), " are not [V, C] and [T, C] tables of one width");
  c.vocab = int(wte[0]);
  c.dim = int(wte[1]);
  c.seq = int(wpe[0]);
  int layers = 0;
  while (f.contains("transformer.h." + std::to_string(layers) + ".ln_1.weight")) ++layers;
  MT_REQUIRE(layers > 0, path, ": no transformer blocks (transformer.h.0.*) in the file");
  c.layers = layers;
  if (auto heads = metadata_int(f, "heads")) c.heads = *heads;

  // Mixture of experts: block i has a router when (i + 1) % moe_every == 0
  // (ModelConfig::moe_layers), each with the same number of experts.
  int first_moe = 0;
  while (first_moe < layers && !f.contains(block_tensor(first_moe, "mlp.router.weight")))
    ++first_moe;
  if (first_moe == layers) {
    c.experts = 0;
    return c;
  }
  int experts = 0;
  while (f.contains(expert_tensor(first_moe, experts))) ++experts;
  MT_REQUIRE(experts > 0, path, ": ", block_tensor(first_moe, "mlp.router.weight"),
             " but no experts (", expert_tensor(first_moe, 0), ")");
  const int moe_every = first_moe + 1;
  for (int i = 0; i < layers; ++i) {
    const bool moe = (i + 1) % moe_every == 0;
    MT_REQUIRE(f.contains(block_tensor(i, "mlp.router.weight")) == moe, path,
               ": the first mixture-of-experts block is ", first_moe, " (every ", moe_every,
               ") but block ", i, (moe ? " has no" : " has a"), " router");
    MT_REQUIRE(!moe || (f.contains(expert_tensor(i, experts - 1)) &&
                        !f.contains(expert_tensor(i, experts))),
               path, ": block ", first_moe, " has ", experts, " experts but block ", i,
               " has a different number");
  }
  c.experts = experts;
  c.moe_every = moe_every;
  if (auto cf = metadata_float(f, "capacity_factor")) c.capacity_factor = *cf;
  if (auto topk = metadata_int(f, "topk")) {
    MT_REQUIRE(*topk <= experts, path, ": metadata \"topk\" is ", *topk, " but the file has ",
               experts, " experts");
    c.topk = *topk;
  } else {
    // Files written before top-k was recorded: the caller's value, if it has one.
    MT_REQUIRE(base.topk > 0, path, " is a mixture-of-experts model (", experts,
               " experts) without top-k in its metadata: give --topk K");
  }
  return c;
}

void export_weights(const std::string& path, const GPT& model) {
  export_weights(path, model.table(), model.config(), const_cast<GPT&>(model).params().data());
}

void export_weights(const std::string& path, const ParamTable& table, const ModelConfig& cfg,
                    const float* params) {
  export_weights(path, table, cfg, assemble_global(table, params, nullptr));
}

void export_weights(const std::string& path, const ParamTable& table, const ModelConfig& cfg,
                    const GlobalTensors& params) {
  write_arena(path, table, params, "", config_metadata(cfg));
}

void import_weights(const std::string& path, GPT& model) {
  import_weights(path, model.table(), model.params().data());
}

void import_weights(const std::string& path, const ParamTable& table, float* params) {
  SafetensorsFile f(path);
  read_arena(f, table, params, "");
}

void save_checkpoint(const std::string& dir, const ParamTable& table, const ModelConfig& cfg,
                     const GlobalState& g, const TrainState& state) {
  save_checkpoint(dir, table, cfg, assemble_global(table, g.params, nullptr),
                  assemble_global(table, g.exp_avg, nullptr),
                  assemble_global(table, g.exp_avg_sq, nullptr), state);
}

void save_checkpoint(const std::string& dir, const ParamTable& table, const ModelConfig& cfg,
                     const GlobalTensors& params, const GlobalTensors& exp_avg,
                     const GlobalTensors& exp_avg_sq, const TrainState& state,
                     const std::vector<NamedTensor>& optimizer_extra) {
  // A save replaces the directory whole: re-check, at the moment of replacing it, that
  // nothing but a checkpoint is there (the run checked at its start; a user may have put a
  // file there since).
  const std::string conflict = checkpoint_dir_conflict(dir);
  if (!conflict.empty())
    throw RuntimeError(str("not saving the checkpoint of step ", state.step, ": ", conflict));
  publish_dir_atomic(dir, [&](const std::string& tmp) {
    auto meta = config_metadata(cfg);
    const FileDigest model = write_arena(tmp + "/" + kModelFile, table, params, "", meta);
    // The optimizer file holds both moments under suffixed names.
    std::vector<std::string> n1, n2;
    auto t1 = global_tensors(table, exp_avg, ".exp_avg", n1);
    auto t2 = global_tensors(table, exp_avg_sq, ".exp_avg_sq", n2);
    t1.insert(t1.end(), t2.begin(), t2.end());
    for (const NamedTensor& e : optimizer_extra)
      t1.push_back({e.name, {int64_t(e.data.size())}, e.data.data()});
    const FileDigest optimizer = write_safetensors(tmp + "/" + kOptimizerFile, t1, meta);
    // The manifest: a load verifies every byte of both files against it before trusting them.
    nlohmann::json j = {
        {"format_version", kFormatVersion},
        {"step", state.step},
        {"data_position", state.data_position},
        {"seed", state.seed},
        {"model", config_metadata(cfg)},
        {"files",
         {{kModelFile, manifest_entry(model)}, {kOptimizerFile, manifest_entry(optimizer)}}}};
    write_file_atomic(tmp + "/" + kStateFile, j.dump(2) + "\n");
  });
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
  return s;
}

}  // namespace

TrainState read_train_state(const std::string& dir) {
  return parse_train_state(read_state_json(dir), "--load " + dir);
}

CheckpointVerification verify_checkpoint(const std::string& dir) {
  const std::string where = "--load " + dir;
  require_input_dir("--load", dir);
  const nlohmann::json j = read_state_json(dir);
  parse_train_state(j, where);
  CheckpointVerification out;
  const nlohmann::json* files = j.contains("files") ? &j["files"] : nullptr;
  MT_REQUIRE(!files || files->is_object(), where, ": state.json \"files\" is not an object");
  for (const char* name : {kModelFile, kOptimizerFile}) {
    const std::string path = dir + "/" + name;
    require_input_file(where + ":", path);
    if (!files) continue;
    MT_REQUIRE(files->contains(name) && (*files)[name].is_object(), where,
               ": state.json lists no checksum for ", name);
    const nlohmann::json& e = (*files)[name];
    MT_REQUIRE(e.contains("bytes") && e["bytes"].is_number_unsigned() && e.contains("crc32c") &&
                   e["crc32c"].is_string(),
               where, ": state.json's entry for ", name, " needs \"bytes\" and \"crc32c\"");
    const FileDigest d = digest_file(path);
    MT_REQUIRE(d.bytes == e["bytes"].get<uint64_t>(), where, ": ", name, " is ", d.bytes,
               " bytes but the checkpoint recorded ", e["bytes"].get<uint64_t>(),
               " (truncated or replaced); resume from another checkpoint");
    MT_REQUIRE(crc32c_hex(d.crc32c) == e["crc32c"].get<std::string>(), where, ": ", name,
               " fails its checksum (crc32c ", crc32c_hex(d.crc32c), ", recorded ",
               e["crc32c"].get<std::string>(),
               "): the file is damaged; resume from another checkpoint");
    out.bytes_verified += d.bytes;
  }
  out.verified = files != nullptr;
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
  read_arena(weights, table, g.params, "");
  SafetensorsFile moments(dir + "/" + kOptimizerFile);
  read_arena(moments, table, g.exp_avg, ".exp_avg");
  read_arena(moments, table, g.exp_avg_sq, ".exp_avg_sq");
  return s;
}

std::string router_bias_name(const std::string& router_weight_name) {
  const std::string weight = ".weight";
  MT_CHECK(router_weight_name.ends_with(".router" + weight), router_weight_name,
           " is not a router weight");
  return router_weight_name.substr(0, router_weight_name.size() - weight.size()) + ".expert_bias";
}

void load_router_biases(const std::string& dir, const ParamTable& table,
                        const std::vector<MoeLayer*>& moe) {
  if (moe.empty()) return;
  SafetensorsFile f(dir + "/" + kOptimizerFile);
  size_t i = 0;
  for (const ParamInfo& p : table.entries()) {
    if (!p.name.ends_with(".mlp.router.weight")) continue;
    MT_CHECK(i < moe.size(), "more routers in the table than MoE layers");
    std::vector<float>& bias = moe[i++]->router_bias();
    const std::string name = router_bias_name(p.name);
    if (!f.contains(name)) continue;
    f.expect_shape(name, {int64_t(bias.size())});
    f.read(name, bias.data(), bias.size());
  }
  MT_CHECK(i == moe.size(), "the table holds ", i, " routers for ", moe.size(), " MoE layers");
}

}  // namespace mt
