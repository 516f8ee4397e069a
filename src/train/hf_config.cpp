#include "train/hf_config.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "core/error.h"
#include "core/json_depth.h"
#include "train/json_error.h"

namespace mt {

using json = nlohmann::json;

namespace {

constexpr const char* kArchitecture = "LlamaForCausalLM";
// §9a: an MoE export is a meshtrain directory (its attention is not DeepSeek-V3's MLA).
constexpr const char* kMoeModelType = "meshtrain_moe";
constexpr const char* kMoeArchitecture = "MeshtrainMoeForCausalLM";

// LlamaConfig's defaults for the keys it does not require (transformers' configuration_llama).
constexpr double kHfDefaultNormEps = 1e-6;
constexpr double kHfDefaultRopeTheta = 10000.0;

// Keys that shape the model, read by read_shape / read_rope_scaling.
const std::set<std::string>& shape_keys() {
  static const std::set<std::string> keys = {"architectures",       "model_type",
                                             "hidden_size",         "intermediate_size",
                                             "num_hidden_layers",   "num_attention_heads",
                                             "num_key_value_heads", "head_dim",
                                             "vocab_size",          "rms_norm_eps",
                                             "rope_theta",          "rope_scaling",
                                             "tie_word_embeddings", "max_position_embeddings"};
  return keys;
}

// DeepseekV3Config's MoE keys (§9a), the shape of a meshtrain_moe directory's MoE layers.
const std::set<std::string>& moe_keys() {
  static const std::set<std::string> keys = {
      "n_routed_experts", "num_experts_per_tok",   "moe_intermediate_size",
      "n_shared_experts", "first_k_dense_replace", "routed_scaling_factor",
      "scoring_func",     "norm_topk_prob",        "moe_layer_freq"};
  return keys;
}

bool is_moe_type(const json& j) {
  return j.contains("model_type") && j["model_type"] == kMoeModelType;
}

// Keys that change the math, at the only values meshtrain computes (check_honoured_keys).
const std::set<std::string>& honoured_keys() {
  static const std::set<std::string> keys = {"hidden_act", "attention_bias", "mlp_bias",
                                             "attention_dropout", "pretraining_tp"};
  return keys;
}

// Keys that cannot change the model: generation's token ids, a fresh model's init range, the
// cache switch, the storage dtype (the tensors say theirs; check_storage_dtype), provenance.
const std::set<std::string>& inert_keys() {
  static const std::set<std::string> keys = {
      "bos_token_id", "eos_token_id", "pad_token_id",         "initializer_range", "use_cache",
      "torch_dtype",  "dtype",        "transformers_version", "_name_or_path"};
  return keys;
}

// Shortest text that reads back as the same float (1e-05, not 9.99999975e-06).
std::string float_text(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  MT_CHECK(r.ec == std::errc(), "cannot format ", v);
  return std::string(buf, r.ptr);
}

json parse_object(const std::string& text, const std::string& where) {
  MT_REQUIRE(json_nesting_depth(text) <= kMaxJsonDepth, where, " nests deeper than ", kMaxJsonDepth,
             " levels; a config.json nests 2");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    throw UsageError(str(where, " is not valid JSON: ", json_syntax_error(text)));
  }
  MT_REQUIRE(j.is_object(), where, " is not a JSON object");
  return j;
}

int positive_int(const json& j, const char* key, const std::string& where) {
  const json& v = j.at(key);
  MT_REQUIRE(v.is_number_unsigned() && v.get<uint64_t>() >= 1 && v.get<uint64_t>() <= INT_MAX,
             where, ": ", key, " is ", v.dump(), ", not an integer in 1..", INT_MAX);
  return int(v.get<uint64_t>());
}

int required_int(const json& j, const char* key, const std::string& where) {
  MT_REQUIRE(j.contains(key), where, " has no ", key,
             " (a Llama config.json needs hidden_size, intermediate_size, num_attention_heads, "
             "num_hidden_layers and vocab_size)");
  return positive_int(j, key, where);
}

// A number > lo (> 0 by default), or `fallback` when the key is absent.
double number_above(const json& j, const char* key, double fallback, const std::string& where,
                    double lo = 0) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  MT_REQUIRE(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > lo, where, ": ",
             key, " is ", v.dump(), ", not a finite number > ", lo);
  return v.get<double>();
}

void refuse_unknown_keys(const json& j, const std::string& where) {
  const bool moe = is_moe_type(j);
  for (const auto& [key, value] : j.items())
    MT_REQUIRE(shape_keys().count(key) || honoured_keys().count(key) || inert_keys().count(key) ||
                   (moe && moe_keys().count(key)),
               where, ": key \"", key,
               "\" is not one meshtrain can honour (it may change the model's math); "
               "docs/huggingface.md lists the keys read");
}

void check_architecture(const json& j, const std::string& where) {
  MT_REQUIRE(j.contains("model_type") && j["model_type"].is_string(), where,
             " has no model_type (a Llama config.json has \"model_type\": \"llama\")");
  const std::string type = j["model_type"].get<std::string>();
  MT_REQUIRE(type == "llama" || type == kMoeModelType, where, ": model_type \"", type,
             "\" is not llama; meshtrain reads LlamaForCausalLM directories (and its own ",
             kMoeModelType, " ones)");
  if (!j.contains("architectures")) return;
  const json& a = j["architectures"];
  const char* arch = type == "llama" ? kArchitecture : kMoeArchitecture;
  MT_REQUIRE(a.is_null() || a == json::array({arch}), where, ": architectures ", a.dump(),
             " is not [\"", arch, "\"]");
}

// The keys that change the math, at the values meshtrain's block computes.
void check_honoured_keys(const json& j, const std::string& where) {
  if (j.contains("hidden_act")) {
    const json& v = j["hidden_act"];
    // transformers maps "swish" to the same SiLU.
    MT_REQUIRE(v == "silu" || v == "swish", where, ": hidden_act ", v.dump(),
               " is not silu (meshtrain's MLP is SwiGLU: silu(gate) * up)");
  }
  for (const char* key : {"attention_bias", "mlp_bias"})
    MT_REQUIRE(!j.contains(key) || j[key] == false, where, ": ", key, " is ", j[key].dump(),
               "; meshtrain's Llama block has no biases (section 9)");
  // A training setting (transformers drops the probabilities in train mode only): the forward
  // meshtrain computes from the directory is the same at any rate; a run drops by --dropout.
  if (j.contains("attention_dropout")) {
    const json& v = j["attention_dropout"];
    MT_REQUIRE(v.is_number() && v.get<double>() >= 0.0 && v.get<double>() < 1.0, where,
               ": attention_dropout is ", v.dump(), ", not a probability in [0, 1)");
  }
  if (j.contains("pretraining_tp")) positive_int(j, "pretraining_tp", where);
}

// The storage dtype a config.json announces (torch_dtype; dtype in newer transformers). The
// tensors say their own, but a directory of one meshtrain cannot load (float8, int8) is
// refused here by name, before its shards are opened.
void check_storage_dtype(const json& j, const std::string& where) {
  static const std::set<std::string> loaded = {"float32", "bfloat16", "float16"};
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const json& v = j[key];
    MT_REQUIRE(v.is_string() && loaded.count(v.get<std::string>()), where, ": ", key, " ", v.dump(),
               " is not a dtype meshtrain loads (float32, bfloat16 or float16)");
  }
}

RopeScaling read_rope_scaling(const json& j, const std::string& where) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return {};
  const json& s = j["rope_scaling"];
  const std::string at = where + ": rope_scaling";
  MT_REQUIRE(s.is_object(), at, " is ", s.dump(), ", not an object or null");
  for (const auto& [key, value] : s.items())
    MT_REQUIRE(key == "rope_type" || key == "type" || key == "factor" || key == "low_freq_factor" ||
                   key == "high_freq_factor" || key == "original_max_position_embeddings",
               at, " key \"", key, "\" is not one of llama3's; meshtrain implements llama3 only");
  // transformers reads "rope_type", and "type" from configs written before it.
  const json type = s.contains("rope_type") ? s["rope_type"] : s.value("type", json());
  MT_REQUIRE(type.is_string(), at, " has no rope_type");
  MT_REQUIRE(!s.contains("rope_type") || !s.contains("type") || s["type"] == type, at,
             " has rope_type ", type.dump(), " and type ", s.value("type", json()).dump());
  if (type == "default") return {};  // transformers' name for plain RoPE
  MT_REQUIRE(type == "llama3", at, " type ", type.dump(),
             " is not implemented; meshtrain implements Llama 3.1's llama3");
  for (const char* key :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
    MT_REQUIRE(s.contains(key), at, " of type llama3 has no ", key);
  RopeScaling r;
  r.factor = number_above(s, "factor", 0, at, 0);
  r.low_freq_factor = number_above(s, "low_freq_factor", 0, at, 0);
  r.high_freq_factor = number_above(s, "high_freq_factor", 0, at, 0);
  r.original_max_position = positive_int(s, "original_max_position_embeddings", at);
  MT_REQUIRE(r.high_freq_factor > r.low_freq_factor, at, ": high_freq_factor ", r.high_freq_factor,
             " must be greater than low_freq_factor ", r.low_freq_factor);
  return r;
}

// A key that may be null (transformers then uses the default), else a positive integer.
int optional_int(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return 0;
  return positive_int(j, key, where);
}

void read_shape(const json& j, const std::string& where, ModelConfig& c) {
  c.arch = Arch::llama;
  c.experts = 0;
  c.dim = required_int(j, "hidden_size", where);
  c.ffn_dim = required_int(j, "intermediate_size", where);
  c.heads = required_int(j, "num_attention_heads", where);
  c.layers = required_int(j, "num_hidden_layers", where);
  c.vocab = required_int(j, "vocab_size", where);
  c.kv_heads = optional_int(j, "num_key_value_heads", where);
  const int head_dim = optional_int(j, "head_dim", where);
  // 0 = dim / heads, as the flags say it (a config.json of transformers >= 4.45 always has it).
  c.head_size = head_dim > 0 && int64_t(head_dim) * c.heads != c.dim ? head_dim : 0;
  if (head_dim == 0)
    MT_REQUIRE(c.dim % c.heads == 0, where, ": num_attention_heads ", c.heads,
               " does not divide hidden_size ", c.dim, " and there is no head_dim");
  c.norm_eps = float(number_above(j, "rms_norm_eps", kHfDefaultNormEps, where));
  c.rope_theta = number_above(j, "rope_theta", kHfDefaultRopeTheta, where, 1);
  c.tie_embeddings = false;
  if (j.contains("tie_word_embeddings")) {
    MT_REQUIRE(j["tie_word_embeddings"].is_boolean(), where, ": tie_word_embeddings is ",
               j["tie_word_embeddings"].dump(), ", not true or false");
    c.tie_embeddings = j["tie_word_embeddings"].get<bool>();
  }
  if (j.contains("max_position_embeddings") && !j["max_position_embeddings"].is_null())
    c.seq = positive_int(j, "max_position_embeddings", where);
  c.positions = 0;
}

// The MoE structure of a meshtrain_moe config.json (§9a), all keys required: it is a
// meshtrain directory, written whole by hf_config_text.
void read_moe_shape(const json& j, const std::string& where, ModelConfig& c) {
  for (const std::string& key : moe_keys())
    MT_REQUIRE(j.contains(key), where, " (model_type ", kMoeModelType, ") has no ", key);
  c.experts = positive_int(j, "n_routed_experts", where);
  c.topk = positive_int(j, "num_experts_per_tok", where);
  c.expert_ffn_dim = positive_int(j, "moe_intermediate_size", where);
  c.moe_every = positive_int(j, "moe_layer_freq", where);
  const json& shared = j["n_shared_experts"];
  MT_REQUIRE(shared.is_null() || shared.is_number_unsigned(), where, ": n_shared_experts is ",
             shared.dump(), ", not null or an integer >= 0");
  c.shared_experts =
      shared.is_null() ? 0 : int(std::min<uint64_t>(shared.get<uint64_t>(), INT_MAX));
  const json& dense = j["first_k_dense_replace"];
  MT_REQUIRE(dense.is_number_unsigned(), where, ": first_k_dense_replace is ", dense.dump(),
             ", not an integer >= 0");
  c.first_dense_layers = int(std::min<uint64_t>(dense.get<uint64_t>(), INT_MAX));
  c.routed_scale = float(number_above(j, "routed_scaling_factor", 1.0, where));
  const json& score = j["scoring_func"];
  MT_REQUIRE(score == "softmax" || score == "sigmoid", where, ": scoring_func ", score.dump(),
             " is not softmax or sigmoid");
  c.router = score == "sigmoid" ? RouterScore::sigmoid : RouterScore::softmax;
  // meshtrain's gates: sigmoid's divided by their sum, softmax's when top-k > 1 (§9).
  const bool norm = c.router == RouterScore::sigmoid || c.topk > 1;
  MT_REQUIRE(j["norm_topk_prob"] == norm, where, ": norm_topk_prob ", j["norm_topk_prob"].dump(),
             " is not ", norm ? "true" : "false", " (meshtrain's ", score.get<std::string>(),
             " router at top-k ", c.topk, ")");
}

}  // namespace

ModelConfig parse_hf_config(const std::string& text, const std::string& where,
                            const ModelConfig& base) {
  const json j = parse_object(text, where);
  check_architecture(j, where);
  refuse_unknown_keys(j, where);
  check_honoured_keys(j, where);
  check_storage_dtype(j, where);
  ModelConfig c = base;
  read_shape(j, where, c);
  if (is_moe_type(j)) read_moe_shape(j, where, c);
  c.rope_scaling = read_rope_scaling(j, where);
  return c;
}

void require_hf_exportable(const ModelConfig& cfg, const std::string& flag) {
  MT_REQUIRE(cfg.llama(), flag,
             " writes a Hugging Face Llama directory (LlamaForCausalLM); this is a --arch gpt2 "
             "model, whose Hugging Face form (GPT2LMHeadModel, transposed Conv1D weights) "
             "meshtrain does not write: use --export FILE for its safetensors");
}

std::string hf_config_text(const ModelConfig& cfg, bool bf16) {
  require_hf_exportable(cfg, "a Hugging Face directory");
  // json's object is a std::map: keys come out sorted, as transformers writes them.
  json j = {{"architectures", {kArchitecture}},
            {"model_type", "llama"},
            {"hidden_size", cfg.dim},
            {"intermediate_size", cfg.hidden()},
            {"num_attention_heads", cfg.heads},
            {"num_key_value_heads", cfg.kv()},
            {"num_hidden_layers", cfg.layers},
            {"head_dim", cfg.head_dim()},
            // The float's shortest decimal, so that 1e-5f reads back as the same float.
            {"rms_norm_eps", std::stod(float_text(cfg.norm_eps))},
            {"rope_theta", cfg.rope_theta},
            {"vocab_size", cfg.vocab},
            {"max_position_embeddings", cfg.seq},
            {"tie_word_embeddings", cfg.tie_embeddings},
            // transformers' one dropout of a Llama: the probabilities' (docs/contracts.md §1).
            {"attention_dropout", std::stod(float_text(cfg.dropout))},
            {"torch_dtype", bf16 ? "bfloat16" : "float32"}};
  if (cfg.experts > 0) {
    j["architectures"] = {kMoeArchitecture};
    j["model_type"] = kMoeModelType;
    j["n_routed_experts"] = cfg.experts;
    j["num_experts_per_tok"] = cfg.topk;
    j["moe_intermediate_size"] = cfg.expert_hidden();
    j["n_shared_experts"] = cfg.shared_experts;
    j["first_k_dense_replace"] = cfg.first_dense_layers;
    j["routed_scaling_factor"] = std::stod(float_text(cfg.routed_scale));
    j["scoring_func"] = cfg.router == RouterScore::sigmoid ? "sigmoid" : "softmax";
    j["norm_topk_prob"] = cfg.router == RouterScore::sigmoid || cfg.topk > 1;
    j["moe_layer_freq"] = cfg.moe_every;
  }
  if (cfg.rope_scaling.enabled()) {
    const RopeScaling& s = cfg.rope_scaling;
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", s.factor},
                         {"low_freq_factor", s.low_freq_factor},
                         {"high_freq_factor", s.high_freq_factor},
                         {"original_max_position_embeddings", s.original_max_position}};
  }
  return j.dump(2) + "\n";
}

namespace {

// One model flag against its config.json key: `take` copies the flag's field, `value`
// prints the resolved value (kv heads 0 = heads, and so on).
struct ShapeFlag {
  const char* flag;
  const char* key;
  void (*take)(ModelConfig& to, const ModelConfig& from);
  std::string (*value)(const ModelConfig& c);
};

const std::vector<ShapeFlag>& shape_flag_table() {
  using C = ModelConfig;
  static const std::vector<ShapeFlag> table = {
      {"arch", "model_type", [](C& t, const C& f) { t.arch = f.arch; },
       [](const C& c) { return std::string(arch_name(c.arch)); }},
      {"layers", "num_hidden_layers", [](C& t, const C& f) { t.layers = f.layers; },
       [](const C& c) { return std::to_string(c.layers); }},
      {"dim", "hidden_size", [](C& t, const C& f) { t.dim = f.dim; },
       [](const C& c) { return std::to_string(c.dim); }},
      {"heads", "num_attention_heads", [](C& t, const C& f) { t.heads = f.heads; },
       [](const C& c) { return std::to_string(c.heads); }},
      {"kv-heads", "num_key_value_heads", [](C& t, const C& f) { t.kv_heads = f.kv_heads; },
       [](const C& c) { return std::to_string(c.kv()); }},
      {"head-dim", "head_dim", [](C& t, const C& f) { t.head_size = f.head_size; },
       [](const C& c) { return std::to_string(c.head_dim()); }},
      {"ffn-dim", "intermediate_size", [](C& t, const C& f) { t.ffn_dim = f.ffn_dim; },
       [](const C& c) { return std::to_string(c.hidden()); }},
      {"vocab", "vocab_size", [](C& t, const C& f) { t.vocab = f.vocab; },
       [](const C& c) { return std::to_string(c.vocab); }},
      {"rope-theta", "rope_theta", [](C& t, const C& f) { t.rope_theta = f.rope_theta; },
       [](const C& c) { return str(c.rope_theta); }},
      {"norm-eps", "rms_norm_eps", [](C& t, const C& f) { t.norm_eps = f.norm_eps; },
       [](const C& c) { return float_text(c.norm_eps); }},
      {"tie-embeddings", "tie_word_embeddings",
       [](C& t, const C& f) { t.tie_embeddings = f.tie_embeddings; },
       [](const C& c) { return std::string(c.tie_embeddings ? "true" : "false"); }},
      {"experts", "n_routed_experts", [](C& t, const C& f) { t.experts = f.experts; },
       [](const C& c) { return std::to_string(c.experts); }},
      {"topk", "num_experts_per_tok", [](C& t, const C& f) { t.topk = f.topk; },
       [](const C& c) { return std::to_string(c.experts > 0 ? c.topk : 0); }},
      {"expert-ffn-dim", "moe_intermediate_size",
       [](C& t, const C& f) { t.expert_ffn_dim = f.expert_ffn_dim; },
       [](const C& c) { return std::to_string(c.experts > 0 ? c.expert_hidden() : 0); }},
      {"shared-experts", "n_shared_experts",
       [](C& t, const C& f) { t.shared_experts = f.shared_experts; },
       [](const C& c) { return std::to_string(c.shared_experts); }},
      {"first-dense-layers", "first_k_dense_replace",
       [](C& t, const C& f) { t.first_dense_layers = f.first_dense_layers; },
       [](const C& c) { return std::to_string(c.first_dense_layers); }},
      {"moe-every", "moe_layer_freq", [](C& t, const C& f) { t.moe_every = f.moe_every; },
       [](const C& c) { return std::to_string(c.moe_every); }},
      {"router", "scoring_func", [](C& t, const C& f) { t.router = f.router; },
       [](const C& c) {
         return std::string(c.router == RouterScore::sigmoid ? "sigmoid" : "softmax");
       }},
      {"routed-scale", "routed_scaling_factor",
       [](C& t, const C& f) { t.routed_scale = f.routed_scale; },
       [](const C& c) { return float_text(c.routed_scale); }},
  };
  return table;
}

}  // namespace

std::optional<std::string> shape_flag_text(const std::string& flag, const ModelConfig& c) {
  for (const ShapeFlag& s : shape_flag_table())
    if (flag == s.flag) return s.value(c);
  return std::nullopt;
}

const std::vector<std::string>& hf_shape_flags() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const ShapeFlag& s : shape_flag_table()) n.push_back(s.flag);
    return n;
  }();
  return names;
}

void require_flags_match_hf(const ModelConfig& flags, const std::vector<std::string>& given,
                            const ModelConfig& dir, const std::string& where) {
  // The flags as given over the directory's shape, so that a flag resolved through another
  // (--kv-heads 0 is --heads) is compared as the model would use it.
  ModelConfig merged = dir;
  auto is_given = [&](const char* flag) {
    return std::find(given.begin(), given.end(), flag) != given.end();
  };
  for (const ShapeFlag& s : shape_flag_table())
    if (is_given(s.flag)) s.take(merged, flags);
  for (const ShapeFlag& s : shape_flag_table()) {
    if (!is_given(s.flag)) continue;
    const std::string want = s.value(dir), got = s.value(merged);
    MT_REQUIRE(got == want, "--", s.flag, " ", got, " contradicts ", where, " (", s.key, " ", want,
               "): the directory sets the model's shape; drop the flag");
  }
}

}  // namespace mt
