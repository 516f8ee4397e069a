// config.json of Hugging Face Llama directories (train/hf_config.h): real configs read with
// transformers' defaults, meshtrain's own read back to the same shape, and every key that
// cannot be honoured refused by name.
#include "train/hf_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "test_util/usage_error.h"

namespace mt {
namespace {

using json = nlohmann::json;

// Llama 3.1 8B's config.json as published (eos_token_id a list, rope_scaling llama3).
const char* kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

// Llama 3.2 1B: tied, head_dim written, rope_scaling factor 32.
const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

// Llama 2 7B: no rope_theta, no head_dim (transformers' defaults: 10000, C/H).
const char* kLlama2_7B = R"({
  "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "tie_word_embeddings": false, "torch_dtype": "float16",
  "transformers_version": "4.31.0.dev0", "use_cache": true, "vocab_size": 32000})";

// TinyLlama 1.1B: _name_or_path, GQA 32:4.
const char* kTinyLlama = R"({
  "_name_or_path": "/data/tinyllama", "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 2048,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22,
  "num_key_value_heads": 4, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": null, "rope_theta": 10000.0, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.35.0", "use_cache": true,
  "vocab_size": 32000})";

ModelConfig parse(const std::string& text) {
  return parse_hf_config(text, "DIR/config.json", ModelConfig{});
}

std::string refusal_of_config(const std::string& text) {
  return test_util::refusal_of([&] { parse(text); }, "the config");
}

TEST(HfConfig, ReadsRealLlamaConfigs) {
  const ModelConfig a = parse(kLlama31_8B);
  EXPECT_TRUE(a.llama());
  EXPECT_EQ(a.layers, 32);
  EXPECT_EQ(a.dim, 4096);
  EXPECT_EQ(a.heads, 32);
  EXPECT_EQ(a.kv(), 8);
  EXPECT_EQ(a.head_dim(), 128);
  EXPECT_EQ(a.hidden(), 14336);
  EXPECT_EQ(a.vocab, 128256);
  EXPECT_EQ(a.seq, 131072);
  EXPECT_EQ(a.norm_eps, 1e-5f);
  EXPECT_EQ(a.rope_theta, 500000.0);
  EXPECT_FALSE(a.tie_embeddings);
  EXPECT_EQ(a.rope_scaling.factor, 8.0);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(a.rope_scaling.original_max_position, 8192);

  const ModelConfig b = parse(kLlama32_1B);
  EXPECT_TRUE(b.tie_embeddings);
  EXPECT_EQ(b.head_dim(), 64);
  EXPECT_EQ(b.rope_scaling.factor, 32.0);

  const ModelConfig c = parse(kLlama2_7B);
  EXPECT_EQ(c.rope_theta, 10000.0);  // absent: LlamaConfig's default
  EXPECT_EQ(c.kv(), 32);
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_FALSE(c.rope_scaling.enabled());

  const ModelConfig d = parse(kTinyLlama);
  EXPECT_EQ(d.kv(), 4);
  EXPECT_EQ(d.layers, 22);
}

TEST(HfConfig, AbsentKeysTakeTransformersDefaults) {
  const ModelConfig c = parse(R"({"model_type": "llama", "hidden_size": 64,
      "intermediate_size": 96, "num_attention_heads": 4, "num_hidden_layers": 2,
      "vocab_size": 300})");
  EXPECT_EQ(c.kv(), 4);
  EXPECT_EQ(c.head_dim(), 16);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_FALSE(c.rope_scaling.enabled());
  EXPECT_EQ(c.seq, ModelConfig{}.seq);  // no max_position_embeddings: the run's
}

TEST(HfConfig, WrittenTextReadsBackToTheSameShape) {
  ModelConfig m;
  m.arch = Arch::llama;
  m.layers = 3;
  m.dim = 64;
  m.heads = 4;
  m.kv_heads = 1;
  m.head_size = 24;  // not C/H
  m.ffn_dim = 160;
  m.vocab = 300;
  m.seq = 48;
  m.norm_eps = 1e-6f;
  m.rope_theta = 12345.5;
  m.tie_embeddings = true;
  m.rope_scaling = RopeScaling{8, 1, 4, 32};
  for (bool bf16 : {false, true}) {
    const std::string text = hf_config_text(m, bf16);
    const json j = json::parse(text);
    EXPECT_EQ(j["torch_dtype"], bf16 ? "bfloat16" : "float32");
    EXPECT_EQ(j["architectures"], json::array({"LlamaForCausalLM"}));
    EXPECT_EQ(j["max_position_embeddings"], 48);
    EXPECT_EQ(j["head_dim"], 24);
    EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
    EXPECT_NE(text.find("\"rms_norm_eps\": 1e-06"), std::string::npos) << text;
    const ModelConfig r = parse(text);
    EXPECT_EQ(r.describe(), m.describe());
    EXPECT_EQ(r.head_dim(), 24);
    EXPECT_EQ(r.kv(), 1);
    EXPECT_EQ(r.norm_eps, m.norm_eps);
    EXPECT_EQ(r.rope_theta, m.rope_theta);
    EXPECT_EQ(r.seq, 48);
    EXPECT_TRUE(r.tie_embeddings);
    EXPECT_EQ(r.rope_scaling.factor, 8);
    EXPECT_EQ(r.rope_scaling.original_max_position, 32);
  }
  m.rope_scaling = {};
  EXPECT_FALSE(json::parse(hf_config_text(m, false)).contains("rope_scaling"));
}

// Each edit of a valid config, and the words its refusal must contain.
TEST(HfConfig, RefusesByNameWhatItCannotHonour) {
  const json base = json::parse(kLlama31_8B);
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"attention_bias", true}}, "attention_bias is true"},
      {{{"mlp_bias", true}}, "mlp_bias is true"},
      {{{"hidden_act", "gelu"}}, "hidden_act \"gelu\" is not silu"},
      {{{"attention_dropout", 0.1}}, "attention_dropout is 0.1"},
      {{{"pretraining_tp", 0}}, "pretraining_tp is 0"},
      {{{"sliding_window", 4096}}, "key \"sliding_window\" is not one meshtrain can honour"},
      {{{"quantization_config", {{"bits", 4}}}}, "key \"quantization_config\""},
      {{{"model_type", "mistral"}}, "model_type \"mistral\" is not llama"},
      {{{"model_type", "meshtrain_moe"}}, "is not [\"MeshtrainMoeForCausalLM\"]"},
      {{{"n_routed_experts", 8}}, "key \"n_routed_experts\" is not one meshtrain can honour"},
      {{{"architectures", {"MistralForCausalLM"}}}, "architectures [\"MistralForCausalLM\"]"},
      {{{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}}, "type \"linear\" is not"},
      {{{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}}}, "type \"yarn\""},
      {{{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}, "has no low_freq_factor"},
      {{{"rope_scaling",
         {{"rope_type", "llama3"},
          {"factor", 8.0},
          {"low_freq_factor", 1.0},
          {"high_freq_factor", 4.0},
          {"original_max_position_embeddings", 8192},
          {"attention_factor", 1.0}}}},
       "key \"attention_factor\""},
      {{{"hidden_size", -1}}, "hidden_size is -1"},
      {{{"num_key_value_heads", 3.5}}, "num_key_value_heads is 3.5"},
      {{{"rms_norm_eps", 0}}, "rms_norm_eps is 0"},
      {{{"rope_theta", "big"}}, "rope_theta is \"big\""},
      {{{"tie_word_embeddings", 1}}, "tie_word_embeddings is 1"},
      {{{"torch_dtype", "float8_e4m3fn"}},
       "torch_dtype \"float8_e4m3fn\" is not a dtype meshtrain loads (float32, bfloat16 or "
       "float16)"},
      {{{"dtype", "int8"}}, "dtype \"int8\" is not a dtype meshtrain loads"},
      {{{"torch_dtype", 16}}, "torch_dtype 16 is not a dtype meshtrain loads"},
  };
  for (const auto& [edit, words] : cases) {
    json c = base;
    c.update(edit);
    const std::string msg = refusal_of_config(c.dump());
    EXPECT_NE(msg.find("DIR/config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(words), std::string::npos) << "edit " << edit.dump() << ": " << msg;
  }
  for (const char* key : {"hidden_size", "intermediate_size", "num_attention_heads",
                          "num_hidden_layers", "vocab_size", "model_type"}) {
    json c = base;
    c.erase(key);
    EXPECT_NE(refusal_of_config(c.dump()).find(std::string("has no ") + key), std::string::npos)
        << key << ": " << refusal_of_config(c.dump());
  }
  EXPECT_NE(refusal_of_config("[1, 2]").find("is not a JSON object"), std::string::npos);
  EXPECT_NE(refusal_of_config("{\"model_type\": ").find("is not valid JSON"), std::string::npos);
  // A number JSON does not have is named by its key, without the library's text or the file's.
  std::string nan_text = base.dump();
  nan_text.replace(nan_text.find("\"rms_norm_eps\":") + 15, 0, "NaN,\"x\":");
  EXPECT_EQ(refusal_of_config(nan_text),
            "DIR/config.json is not valid JSON: the value of \"rms_norm_eps\" (line 1, column " +
                std::to_string(nan_text.find("NaN") + 1) +
                ") is NaN or Infinity, which JSON does not have");
  EXPECT_NE(refusal_of_config(std::string(100, '[')).find("nests deeper"), std::string::npos);
}

TEST(HfConfig, FlagsThatContradictTheDirectoryAreRefused) {
  const ModelConfig dir = parse(kTinyLlama);
  ModelConfig flags;  // what the command line holds
  flags.arch = Arch::llama;
  flags.heads = 32;
  flags.kv_heads = 4;
  flags.seq = 64;  // a training flag: free
  EXPECT_NO_THROW(require_flags_match_hf(flags, {"arch", "heads", "kv-heads"}, dir, "D"));
  flags.kv_heads = 8;
  try {
    require_flags_match_hf(flags, {"heads", "kv-heads"}, dir, "D/config.json");
    ADD_FAILURE() << "--kv-heads 8 accepted";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "--kv-heads 8 contradicts D/config.json (num_key_value_heads 4): the directory "
                 "sets the model's shape; drop the flag");
  }
  // --kv-heads 0 means --heads: 32 here, not the directory's 4.
  flags.kv_heads = 0;
  EXPECT_THROW(require_flags_match_hf(flags, {"kv-heads"}, dir, "D"), UsageError);
  // A flag not given is not compared, whatever its default.
  ModelConfig defaults;
  EXPECT_NO_THROW(require_flags_match_hf(defaults, {}, dir, "D"));
  defaults.norm_eps = 1e-3f;  // TinyLlama's is the flag's default
  for (const char* flag : {"arch", "layers", "dim", "vocab", "rope-theta", "norm-eps"})
    EXPECT_THROW(require_flags_match_hf(defaults, {flag}, dir, "D"), UsageError) << flag;
  defaults.tie_embeddings = true;
  EXPECT_THROW(require_flags_match_hf(defaults, {"tie-embeddings"}, dir, "D"), UsageError);
  defaults.experts = 4;
  EXPECT_THROW(require_flags_match_hf(defaults, {"experts"}, dir, "D"), UsageError);
}

TEST(HfConfig, OnlyLlamaModelsAreExported) {
  ModelConfig gpt2;
  EXPECT_THROW(require_hf_exportable(gpt2, "--export-hf"), UsageError);
  ModelConfig moe;
  moe.arch = Arch::llama;
  moe.experts = 4;
  EXPECT_NO_THROW(require_hf_exportable(moe, "--export-hf"));
  ModelConfig llama;
  llama.arch = Arch::llama;
  EXPECT_NO_THROW(require_hf_exportable(llama, "--export-hf"));
}

// §9a: an MoE model's config.json is a meshtrain_moe one with DeepseekV3Config's MoE keys,
// read back to the same structure; a key missing or a gate rule meshtrain does not compute
// is refused by name.
TEST(HfConfig, MoeConfigRoundTrips) {
  ModelConfig moe;
  moe.arch = Arch::llama, moe.layers = 4, moe.experts = 8, moe.topk = 2;
  moe.expert_ffn_dim = 48, moe.shared_experts = 2, moe.first_dense_layers = 1;
  moe.moe_every = 1, moe.router = RouterScore::sigmoid, moe.routed_scale = 2.5f;
  const std::string text = hf_config_text(moe, false);
  const json j = json::parse(text);
  EXPECT_EQ(j["model_type"], "meshtrain_moe");
  EXPECT_EQ(j["architectures"], json::array({"MeshtrainMoeForCausalLM"}));
  EXPECT_EQ(j["moe_intermediate_size"], 48);
  EXPECT_EQ(j["norm_topk_prob"], true);
  const ModelConfig back = parse_hf_config(text, "C", ModelConfig{});
  EXPECT_EQ(back.experts, 8);
  EXPECT_EQ(back.topk, 2);
  EXPECT_EQ(back.expert_ffn_dim, 48);
  EXPECT_EQ(back.shared_experts, 2);
  EXPECT_EQ(back.first_dense_layers, 1);
  EXPECT_EQ(back.moe_every, 1);
  EXPECT_EQ(back.router, RouterScore::sigmoid);
  EXPECT_EQ(back.routed_scale, 2.5f);
  json missing = j;
  missing.erase("scoring_func");
  EXPECT_NE(refusal_of_config(missing.dump()).find("has no scoring_func"), std::string::npos);
  json unnormed = j;
  unnormed["norm_topk_prob"] = false;
  EXPECT_NE(refusal_of_config(unnormed.dump()).find("norm_topk_prob false is not true"),
            std::string::npos);
}

}  // namespace
}  // namespace mt
