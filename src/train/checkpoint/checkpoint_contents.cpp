#include "train/checkpoint/checkpoint_contents.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/global_view.h"
#include "train/option_limits.h"
#include "train/safetensors.h"
#include "train/weights_file.h"

namespace mt {

std::vector<CheckpointTensor> checkpoint_tensors(const ModelConfig& model) {
  const ParamTable table = whole_model_table(model);
  std::vector<CheckpointTensor> out;
  for (const ParamInfo& p : table.entries()) {
    out.push_back({p.name, p.global_shape, CheckpointTensor::Kind::weight});
    for (const char* suffix : kMomentSuffixes)
      out.push_back({p.name + suffix, p.global_shape, CheckpointTensor::Kind::moment});
  }
  for (const std::string& bias : router_bias_names(table))
    out.push_back({bias, {int64_t(model.experts)}, CheckpointTensor::Kind::router_bias});
  return out;
}

void check_manifest_contents(const Manifest& m, const std::string& where) {
  std::map<std::string, const ManifestTensor*> listed;
  for (const ManifestTensor& t : m.tensors) listed[t.name] = &t;
  for (const CheckpointTensor& want : checkpoint_tensors(m.model)) {
    const auto it = listed.find(want.name);
    MT_REQUIRE(it != listed.end(), where, ": the manifest lists no tensor ", want.name,
               ", which its model (", m.model.layers, " layers, dim ", m.model.dim,
               ") needs: a load would refuse this checkpoint");
    MT_REQUIRE(it->second->shape == want.shape, where, ": tensor ", want.name, " is ",
               shape_str(it->second->shape), " in the manifest, but its model's is ",
               shape_str(want.shape), ": a load would refuse this checkpoint");
  }
}

namespace {

// The fields of state.json's "model" that the tensors' shapes determine: the model the
// files must hold. Each written by config_metadata as a decimal integer, and read within
// the options' limits (option_limits.h), as a run's flags are: a crafted value must not
// size the table of expected tensors.
constexpr const char* kShapeFields[] = {"layers", "dim", "seq", "vocab", "experts", "moe_every"};
constexpr int kShapeLimits[] = {limits::kMaxLayers, limits::kMaxDim,     limits::kMaxSeq,
                                limits::kMaxVocab,  limits::kMaxExperts, limits::kMaxLayers};

int recorded_int(const nlohmann::json& model, const char* key, int most, int fallback,
                 const std::string& where) {
  if (!model.contains(key)) return fallback;
  const nlohmann::json& v = model[key];
  MT_REQUIRE(v.is_string(), where, ": state.json's model \"", key, "\" is not a string");
  const std::string s = v.get<std::string>();
  int n = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), n);
  MT_REQUIRE(r.ec == std::errc() && r.ptr == s.data() + s.size() && n >= 0 && n <= most, where,
             ": state.json's model \"", key, "\" is \"", s, "\", not an integer in 0..", most);
  return n;
}

// The model the files were written for: the one their tensors and metadata describe, with
// the shape fields state.json records (so a tensor missing from the file is named as
// missing, not taken for a smaller model).
ModelConfig recorded_model(const std::string& model_file, const nlohmann::json& state,
                           const std::string& where) {
  ModelConfig c = model_config_from_file(model_file, ModelConfig{});
  if (!state.contains("model")) return c;  // written before the config was recorded
  const nlohmann::json& m = state["model"];
  MT_REQUIRE(m.is_object(), where, ": state.json's \"model\" is not an object");
  // A learned position table may be longer than the recorded seq (a run begun with
  // --init-from of a longer one keeps it whole; the resumed run takes it, train_setup.cpp).
  const int position_rows = c.position_rows();
  int* fields[] = {&c.layers, &c.dim, &c.seq, &c.vocab, &c.experts, &c.moe_every};
  for (size_t i = 0; i < std::size(kShapeFields); ++i)
    *fields[i] = recorded_int(m, kShapeFields[i], kShapeLimits[i], *fields[i], where);
  if (position_rows > c.seq) c.positions = position_rows;
  return c;
}

}  // namespace

std::vector<std::string> check_global_contents(const std::string& dir, const nlohmann::json& state,
                                               const std::string& where) {
  const std::string model_path = dir + "/model.safetensors";
  const SafetensorsFile weights(model_path);
  const SafetensorsFile optimizer(dir + "/optimizer.safetensors");
  const ModelConfig model = recorded_model(model_path, state, where);
  for (const CheckpointTensor& t : checkpoint_tensors(model)) {
    const bool bias = t.kind == CheckpointTensor::Kind::router_bias;
    if (bias && !optimizer.contains(t.name)) continue;  // saved before router biases were
    (t.kind == CheckpointTensor::Kind::weight ? weights : optimizer).expect_shape(t.name, t.shape);
  }
  // Written before the tie was recorded: a llama file without lm_head.weight reads as tied,
  // so an untied model's missing head cannot be told from a tied model's absent one.
  if (model.llama() && model.tie_embeddings && !weights.metadata().contains("tie_embeddings"))
    return {
        "lm_head.weight (written before checkpoints recorded tie_embeddings: a llama "
        "checkpoint without it reads as tied, so an untied one that lost its head cannot be "
        "told apart)"};
  return {};
}

void NonFiniteScan::feed(const char* bytes, size_t n, uint64_t at) {
  if (found_ || at + n <= first_) return;
  size_t i = at < first_ ? size_t(first_ - at) : 0;
  auto finite = [&](const char* word, uint64_t offset) {
    float v = 0;
    std::memcpy(&v, word, sizeof v);
    if (!std::isfinite(v)) found_ = offset;
    return !found_;
  };
  // A value begun in the last feed, completed from this one.
  if (carried_ > 0) {
    const size_t take = std::min(n - i, sizeof carry_ - carried_);
    std::memcpy(carry_ + carried_, bytes + i, take);
    carried_ += take, i += take;
    if (carried_ < sizeof carry_) return;
    carried_ = 0;
    if (!finite(carry_, at + i - sizeof carry_)) return;
  }
  for (; i + sizeof carry_ <= n; i += sizeof carry_)
    if (!finite(bytes + i, at + i)) return;
  // The start of a value the next feed completes (fewer bytes than a value).
  carried_ = std::min(n - i, sizeof carry_ - 1);
  std::memcpy(carry_, bytes + i, carried_);
}

void refuse_non_finite(const std::string& path, uint64_t data_start, uint64_t at) {
  // The load's words (weights_file.cpp), with the element: where to look.
  const SafetensorsFile f(path);
  const uint64_t byte = at - data_start;
  std::string what = str("byte ", at);
  for (const std::string& name : f.names()) {
    const SafetensorsFile::Entry& e = f.tensor(name);
    if (byte >= e.begin && byte < e.end)
      what = str("tensor ", name, " holds NaN or Inf values (",
                 e.dtype == "F32" ? str("element ", (byte - e.begin) / 4) : str("byte ", at), ")");
  }
  throw UsageError(str(path, ": ", what,
                       "; the file is damaged or the run that wrote it diverged, and a load "
                       "would refuse it"));
}

}  // namespace mt
