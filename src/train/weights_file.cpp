#include "train/weights_file.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/reduce.h"
#include "train/global_view.h"
#include "train/hf_directory.h"

namespace mt {

namespace {

// Shortest text that reads back as the same float (double).
template <typename T>
std::string float_str(T v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  MT_CHECK(r.ec == std::errc(), "cannot format ", v);
  return std::string(buf, r.ptr);
}

// Metadata value `key` of `f` as an int >= least (positive by default); nullopt when absent.
std::optional<int> metadata_int(const SafetensorsFile& f, const std::string& key, int least = 1) {
  const auto it = f.metadata().find(key);
  if (it == f.metadata().end()) return std::nullopt;
  const std::string& v = it->second;
  int n = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
  MT_REQUIRE(r.ec == std::errc() && r.ptr == v.data() + v.size() && n >= least, f.path(),
             ": metadata \"", key, "\" is \"", v, "\", not ",
             least > 0 ? "a positive integer" : "an integer >= 0");
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

// Metadata value `key` of `f` as a finite double > 0; nullopt when absent.
std::optional<double> metadata_positive(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  if (it == f.metadata().end()) return std::nullopt;
  const std::string& v = it->second;
  double x = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  MT_REQUIRE(r.ec == std::errc() && r.ptr == v.data() + v.size() && std::isfinite(x) && x > 0,
             f.path(), ": metadata \"", key, "\" is \"", v, "\", not a number > 0");
  return x;
}

// Llama 3.1's rope_scaling, written by config_metadata: all four keys or none.
RopeScaling metadata_rope_scaling(const SafetensorsFile& f) {
  const auto factor = metadata_positive(f, "rope_scaling_factor");
  const auto low = metadata_positive(f, "rope_scaling_low_freq_factor");
  const auto high = metadata_positive(f, "rope_scaling_high_freq_factor");
  const auto original = metadata_int(f, "rope_scaling_original_max_position");
  MT_REQUIRE(factor.has_value() == low.has_value() && low.has_value() == high.has_value() &&
                 high.has_value() == original.has_value(),
             f.path(), ": metadata holds some of the rope_scaling_* entries but not all four");
  if (!factor) return {};
  MT_REQUIRE(*high > *low, f.path(), ": metadata rope_scaling_high_freq_factor ", *high,
             " is not above rope_scaling_low_freq_factor ", *low);
  return RopeScaling{*factor, *low, *high, *original};
}

// "transformer.h.{i}.mlp.router.weight" and friends.
std::string block_tensor(int i, const std::string& rest) {
  return "transformer.h." + std::to_string(i) + "." + rest;
}
std::string expert_tensor(int i, int e) {
  return block_tensor(i, "mlp.experts." + std::to_string(e) + ".c_fc.weight");
}

}  // namespace

std::map<std::string, std::string> config_metadata(const ModelConfig& c) {
  std::map<std::string, std::string> m = {
      {"format", "meshtrain"},        {"layers", std::to_string(c.layers)},
      {"dim", std::to_string(c.dim)}, {"heads", std::to_string(c.heads)},
      {"seq", std::to_string(c.seq)}, {"vocab", std::to_string(c.vocab)}};
  if (c.llama()) {
    // What the tensors' shapes cannot tell apart (heads from head_dim) or do not hold.
    m["arch"] = "llama";
    m["kv_heads"] = std::to_string(c.kv());
    m["head_dim"] = std::to_string(c.head_dim());
    m["ffn_dim"] = std::to_string(c.hidden());
    m["rope_theta"] = float_str(c.rope_theta);
    m["norm_eps"] = float_str(c.norm_eps);
    // A tied file lacks lm_head.weight, and so does an untied one its writer left it out of:
    // only this key tells a reader (checkpoint verify) which was meant.
    m["tie_embeddings"] = c.tie_embeddings ? "true" : "false";
    if (c.rope_scaling.enabled()) {  // Llama 3.1's (from a Hugging Face config.json)
      m["rope_scaling_factor"] = float_str(c.rope_scaling.factor);
      m["rope_scaling_low_freq_factor"] = float_str(c.rope_scaling.low_freq_factor);
      m["rope_scaling_high_freq_factor"] = float_str(c.rope_scaling.high_freq_factor);
      m["rope_scaling_original_max_position"] =
          std::to_string(c.rope_scaling.original_max_position);
    }
  }
  if (c.experts > 0) {
    // The tensors give the experts and the MoE blocks; top-k and the capacity factor (its
    // drops apply whenever the layer runs, sampling included) only live here.
    m["experts"] = std::to_string(c.experts);
    m["topk"] = std::to_string(c.topk);
    m["moe_every"] = std::to_string(c.moe_every);
    m["capacity_factor"] = float_str(c.capacity_factor);
  }
  if (c.experts > 0 && c.llama()) {
    // What the tensors cannot tell: the router, its scale, and how the MoE layers were
    // described (the tensors give the same layers under more than one description).
    m["first_dense_layers"] = std::to_string(c.first_dense_layers);
    m["router"] = c.router == RouterScore::sigmoid ? "sigmoid" : "softmax";
    m["routed_scale"] = float_str(c.routed_scale);
  }
  return m;
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

// Fills this rank's local elements of every tensor from the file's global tensors.
void read_local_elements(const SafetensorsFile& f, const ParamTable& table, float* arena,
                         const std::string& suffix) {
  read_local_elements([&](const std::string&) -> const SafetensorsFile& { return f; }, table, arena,
                      suffix);
}

void read_local_elements(const TensorFileOf& file_of, const ParamTable& table, float* arena,
                         const std::string& suffix) {
  std::vector<float> global;
  for (const ParamInfo& p : table.entries()) {
    const std::string name = p.name + suffix;
    const SafetensorsFile& f = file_of(name);
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

namespace {

std::string llama_tensor(int i, const std::string& rest) {
  return "model.layers." + std::to_string(i) + ".mlp." + rest;
}

// The (first dense layers, moe every) pair that gives exactly the MoE layers `moe` of a model
// of `layers` layers: the first of `candidates` that does, else one derived from the layers
// themselves; 0 when none can.
std::pair<int, int> moe_pattern(const std::vector<int>& moe, int layers,
                                std::vector<std::pair<int, int>> candidates) {
  const int i0 = moe[0];
  const int every = moe.size() > 1 ? moe[1] - i0 : i0 + 1;
  candidates.push_back({std::max(0, i0 - every + 1), every});
  candidates.push_back({i0, 1});  // a single MoE layer, the last one
  for (auto [first, every_k] : candidates) {
    if (first < 0 || every_k < 1) continue;
    std::vector<int> got;
    for (int i = 0; i < layers; ++i)
      if (i >= first && (i + 1) % every_k == 0) got.push_back(i);
    if (got == moe) return {first, every_k};
  }
  return {-1, 0};
}

// The llama MoE structure (§9) of a file: the layers with a router (mlp.gate.weight), the
// routed experts' count and width, the shared experts' width, from the tensors; top-k, the
// router and its scale from the metadata meshtrain writes, else from base (the flags).
// The capacity, aux coefficient and bias step stay the flags' (§9a: training settings).
void llama_moe_from_file(const SafetensorsFile& f, ModelConfig& c, const ModelConfig& base) {
  std::vector<int> moe;
  for (int i = 0; i < c.layers; ++i)
    if (f.contains(llama_tensor(i, "gate.weight"))) moe.push_back(i);
  if (moe.empty()) {
    c.experts = 0;
    return;
  }
  auto expert = [&](int i, int e) {
    return llama_tensor(i, "experts." + std::to_string(e) + ".gate_proj.weight");
  };
  int experts = 0;
  while (f.contains(expert(moe[0], experts))) ++experts;
  MT_REQUIRE(experts > 0, f.path(), ": ", llama_tensor(moe[0], "gate.weight"), " but no experts (",
             expert(moe[0], 0), ")");
  for (int i : moe)
    MT_REQUIRE(f.contains(expert(i, experts - 1)) && !f.contains(expert(i, experts)), f.path(),
               ": layer ", moe[0], " has ", experts, " experts but layer ", i,
               " has a different number");
  c.experts = experts;
  c.expert_ffn_dim = int(f.tensor(expert(moe[0], 0)).shape[0]);
  const std::string shared = llama_tensor(moe[0], "shared_experts.gate_proj.weight");
  const int64_t sw = f.contains(shared) ? f.tensor(shared).shape[0] : 0;
  MT_REQUIRE(sw % c.expert_ffn_dim == 0, f.path(), ": ", shared, " is ", sw,
             " wide, not a multiple of the experts' width ", c.expert_ffn_dim);
  c.shared_experts = int(sw / c.expert_ffn_dim);
  std::vector<std::pair<int, int>> candidates;
  // 0 (no dense first layers) is the default, and what most files record.
  auto meta_first = metadata_int(f, "first_dense_layers", /*least=*/0);
  if (auto every = metadata_int(f, "moe_every"))
    candidates.push_back({meta_first.value_or(0), *every});
  candidates.push_back({base.first_dense_layers, base.moe_every});
  const auto [first, every] = moe_pattern(moe, c.layers, candidates);
  MT_REQUIRE(every > 0, f.path(),
             ": its MoE layers are not those of any --first-dense-layers / "
             "--moe-every (layer i is MoE when i >= N and (i + 1) % k == 0)");
  c.first_dense_layers = first, c.moe_every = every;
  if (auto topk = metadata_int(f, "topk")) c.topk = *topk;
  MT_REQUIRE(c.topk <= experts, f.path(), ": top-k ", c.topk, " but the file has ", experts,
             " experts");
  const auto router = f.metadata().find("router");
  if (router != f.metadata().end()) {
    MT_REQUIRE(router->second == "softmax" || router->second == "sigmoid", f.path(),
               ": metadata \"router\" is \"", router->second, "\", not softmax or sigmoid");
    c.router = router->second == "sigmoid" ? RouterScore::sigmoid : RouterScore::softmax;
  }
  if (auto scale = metadata_positive(f, "routed_scale")) c.routed_scale = float(*scale);
}

// The tie a llama file was written with: its metadata's "tie_embeddings" (meshtrain writes
// it since stop 38), else the tensors (a file without lm_head.weight is taken as tied).
bool tied_in_file(const SafetensorsFile& f) {
  const auto tie = f.metadata().find("tie_embeddings");
  if (tie == f.metadata().end()) return !f.contains("lm_head.weight");
  MT_REQUIRE(tie->second == "true" || tie->second == "false", f.path(),
             ": metadata \"tie_embeddings\" is \"", tie->second, "\", not true or false");
  return tie->second == "true";
}

// A llama file (§9 names): vocab, dim, layers, the q/k/v and SwiGLU widths and the tie from
// the tensors; heads, kv heads, head dim, theta, eps and seq from the metadata meshtrain
// writes, else from base (the flags), checked against the shapes.
ModelConfig llama_config_from_file(const SafetensorsFile& f, const ModelConfig& base) {
  ModelConfig c = base;
  c.arch = Arch::llama;
  const auto& emb = f.tensor("model.embed_tokens.weight").shape;
  MT_REQUIRE(emb.size() == 2, f.path(), ": model.embed_tokens.weight ", shape_str(emb),
             " is not a [V, C] table");
  c.vocab = int(emb[0]);
  c.dim = int(emb[1]);
  int layers = 0;
  while (f.contains("model.layers." + std::to_string(layers) + ".input_layernorm.weight")) ++layers;
  MT_REQUIRE(layers > 0, f.path(), ": no blocks (model.layers.0.*) in the file");
  c.layers = layers;
  if (auto v = metadata_int(f, "heads")) c.heads = *v;
  if (auto v = metadata_int(f, "kv_heads")) c.kv_heads = *v;
  if (auto v = metadata_int(f, "head_dim")) c.head_size = *v;
  if (auto v = metadata_int(f, "seq")) c.seq = *v;
  if (auto v = metadata_positive(f, "rope_theta")) c.rope_theta = *v;
  if (auto v = metadata_positive(f, "norm_eps")) c.norm_eps = float(*v);
  c.rope_scaling = metadata_rope_scaling(f);
  const auto& q = f.tensor("model.layers.0.self_attn.q_proj.weight").shape;
  const auto& k = f.tensor("model.layers.0.self_attn.k_proj.weight").shape;
  const int hd = c.head_size > 0 ? c.head_size : int(q[0]) / c.heads;
  MT_REQUIRE(q.size() == 2 && int64_t(c.heads) * hd == q[0] && k.size() == 2 && k[0] % hd == 0,
             f.path(), ": q_proj ", shape_str(q), " and k_proj ", shape_str(k),
             " do not fit --heads ", c.heads, " of head dim ", hd,
             " (give --heads, --kv-heads and --head-dim as the model was built)");
  if (int64_t(c.heads) * hd != c.dim) c.head_size = hd;
  c.kv_heads = int(k[0] / hd);
  if (f.contains("model.layers.0.mlp.gate_proj.weight"))
    c.ffn_dim = int(f.tensor("model.layers.0.mlp.gate_proj.weight").shape[0]);
  c.tie_embeddings = tied_in_file(f);
  llama_moe_from_file(f, c, base);
  return c;
}

}  // namespace

ModelConfig model_config_from_file(const std::string& path, const ModelConfig& base) {
  if (is_hf_directory(path)) return hf_model_config(path, base);
  SafetensorsFile f(path);
  if (f.contains("model.embed_tokens.weight")) return llama_config_from_file(f, base);
  ModelConfig c = base;
  c.arch = Arch::gpt2;
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

void export_weights(const std::string& path, const ParamTable& table, const ModelConfig& cfg,
                    const GlobalTensors& params, bool as_bf16,
                    const std::map<std::string, std::string>& extra_metadata,
                    const std::vector<NamedTensor>& extra_tensors) {
  auto meta = config_metadata(cfg);
  meta.insert(extra_metadata.begin(), extra_metadata.end());
  std::vector<std::string> names;
  auto tensors = global_tensors(table, params, "", names);
  for (const NamedTensor& t : extra_tensors)
    tensors.push_back({t.name, {int64_t(t.data.size())}, t.data.data()});
  write_safetensors(path, tensors, meta, as_bf16);
}

std::vector<NamedTensor> exported_router_biases(const ModelConfig& cfg,
                                                std::vector<NamedTensor> biases) {
  std::vector<NamedTensor> out;
  if (!cfg.llama()) return out;
  for (NamedTensor& b : biases) {
    const bool nonzero = std::any_of(b.data.begin(), b.data.end(), [](float v) { return v != 0; });
    if (cfg.router_bias_update > 0 || nonzero) out.push_back(std::move(b));
  }
  return out;
}

void import_router_biases(const std::string& path, const std::vector<MoeLayer*>& moe,
                          const ModelConfig& cfg) {
  if (moe.empty() || !cfg.llama()) return;
  // A meshtrain_moe directory (hf_config.h) keeps them in its one weights file; a directory
  // sharded by another writer has none.
  const bool dir = is_hf_directory(path);
  const std::string file = dir ? path + "/" + kHfWeightsFile : path;
  std::error_code ec;
  if (dir && !std::filesystem::is_regular_file(file, ec)) return;
  SafetensorsFile f(file);
  for (MoeLayer* m : moe) {
    const std::string name = router_bias_name(router_weight_name(cfg, m->layer()));
    if (!f.contains(name)) continue;
    std::vector<float>& bias = m->router_bias();
    f.expect_shape(name, {int64_t(bias.size())});
    f.read(name, bias.data(), bias.size());
    MT_REQUIRE(all_finite(bias.data(), bias.size()), f.path(), ": tensor ", name,
               " holds NaN or Inf values");
  }
}

void import_weights(const std::string& path, GPT& model) {
  import_weights(path, model.table(), model.params().data());
}

void import_weights(const std::string& path, const ParamTable& table, float* params) {
  if (is_hf_directory(path)) return import_hf_weights(path, table, params);
  SafetensorsFile f(path);
  read_local_elements(f, table, params, "");
}

}  // namespace mt
