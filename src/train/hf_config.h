// config.json of a Hugging Face Llama directory (docs/contracts.md §9 and §9a,
// docs/huggingface.md): LlamaConfig's keys, read into a ModelConfig and written from one.
//
// Reading follows Hugging Face's meaning of the file, so that the model meshtrain builds is
// the one transformers builds from it: a key LlamaConfig gives a default (num_key_value_heads,
// head_dim, rms_norm_eps 1e-6, rope_theta 10000, tie_word_embeddings false, rope_scaling none)
// takes that default when absent, and the five keys without a usable default (hidden_size,
// intermediate_size, num_attention_heads, num_hidden_layers, vocab_size) must be there. Every
// key present is checked, in three kinds:
//   shape   the model's shape: positive integers, finite numbers, a bool;
//   honoured keys that change the math, accepted only at the values meshtrain computes
//           (hidden_act silu, attention_bias and mlp_bias false, rope_scaling absent or of
//           type llama3; pretraining_tp any >= 1, which only changes how transformers slices
//           the same matmuls; attention_dropout any rate in [0, 1): a training setting that
//           leaves the forward unchanged, written as the run's --dropout);
//   inert   keys that cannot change the model (token ids, initializer_range, use_cache,
//           torch_dtype, transformers_version, ...): any value.
// Any other key is refused by name: it might change the math (a sliding_window, a
// quantization_config), and a model computed without it would be another model.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/config.h"

namespace mt {

inline constexpr const char* kHfConfigFile = "config.json";

// The model config.json describes, over base's training settings (capacity, aux coefficient
// and the like stay base's): arch llama, layers, dim, heads, kv heads, head dim, ffn dim,
// vocab, norm eps, rope theta and scaling, tie; seq = max_position_embeddings when present
// (else base's). `where` names the file in errors. Throws UsageError naming the key.
ModelConfig parse_hf_config(const std::string& text, const std::string& where,
                            const ModelConfig& base);

// The text of config.json for `cfg` (a dense llama, require_hf_exportable): the keys of §9a,
// sorted as transformers writes them; max_position_embeddings = cfg.seq; torch_dtype
// bfloat16 when bf16, else float32. parse_hf_config reads it back to the same shape.
std::string hf_config_text(const ModelConfig& cfg, bool bf16);

// A Hugging Face Llama directory describes dense llama models only: gpt2 (whose HF names and
// layouts differ) and mixture-of-experts models are refused naming `flag`.
void require_hf_exportable(const ModelConfig& cfg, const std::string& flag);

// The directory sets the model's shape (§9a): a model flag the user gave (`given`: flag
// names without dashes) whose value contradicts the directory's is a UsageError naming both
// values and the config key. Training flags (--seq, capacity, ...) are not shape flags.
void require_flags_match_hf(const ModelConfig& flags, const std::vector<std::string>& given,
                            const ModelConfig& dir, const std::string& where);

// The value of shape flag `flag` as the model uses it (--kv-heads 0 is --heads), as text;
// nullopt when `flag` is not a shape flag. A resumed run compares its checkpoint's shape
// through it (train/resume_changes.h).
std::optional<std::string> shape_flag_text(const std::string& flag, const ModelConfig& c);

// The model flags require_flags_match_hf compares (for the CLI to record which were given).
const std::vector<std::string>& hf_shape_flags();

}  // namespace mt
