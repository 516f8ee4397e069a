// Model hyper-parameters and their validation: the GPT-2 block (docs/contracts.md §1) and the
// Llama family (--arch llama, §9).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/rope.h"
#include "kernels/router.h"

namespace mt {

// gpt2: LayerNorm with biases, learned positions, GELU MLP of 4C, tied head (§1).
// llama: RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases, untied head by default (§9).
enum class Arch { gpt2, llama };
// "gpt2" | "llama"; false for anything else.
bool parse_arch(const std::string& s, Arch* out);
const char* arch_name(Arch a);

struct ModelConfig {
  Arch arch = Arch::gpt2;
  int layers = 4;
  int dim = 128;
  int heads = 4;
  int seq = 128;  // context length T
  // Rows of the position table; 0 means seq. An --init-from file may hold more rows than
  // the run uses (nanoGPT's block size): the first seq rows are used, all are kept.
  int positions = 0;
  int vocab = 256;  // byte-level by default
  // The largest vocabulary: ids are int32 everywhere a token travels (batches, kernels, the
  // version-2 shards' uint32 ids once checked against the vocabulary).
  static constexpr int kMaxVocab = 2147483647;
  // Mixture of experts (0 = dense). Math in docs/contracts.md §1, MoE variant.
  int experts = 0;
  int topk = 2;
  int moe_every = 1;
  float capacity_factor = 0;
  float aux_loss_coef = 0.01f;
  float router_bias_update = 0;
  // DeepSeek-V3's MoE on the llama block (§9, "Mixture of experts under --arch llama"); the
  // gpt2 MoE keeps section 1's softmax router and GELU experts of the dense width.
  int expert_ffn_dim = 0;      // routed experts' SwiGLU width Fe (default the ffn width)
  int shared_experts = 0;      // S: one SwiGLU of width S * Fe on every token (0 = none)
  int first_dense_layers = 0;  // layers 0..N-1 keep the dense MLP
  RouterScore router = RouterScore::softmax;
  float routed_scale = 1.0f;  // the routed experts' gates are multiplied by it

  // --arch llama only (§9); 0 means the default named in each comment.
  int kv_heads = 0;   // key/value heads Hkv, dividing heads (default heads)
  int head_size = 0;  // --head-dim (default dim / heads)
  int ffn_dim = 0;    // SwiGLU width (default 256 * ceil((8C/3) / 256))
  double rope_theta = 500000.0;
  RopeScaling rope_scaling;  // Llama 3.1 "rope_scaling" (from a Hugging Face config.json)
  float norm_eps = 1e-5f;
  bool tie_embeddings = false;  // gpt2 is always tied

  // --dropout P (nanoGPT's places: embedding, attention probabilities, residual branches;
  // model/dropout_state.h). Training only; 0 adds nothing to the model.
  float dropout = 0;

  bool llama() const { return arch == Arch::llama; }
  int head_dim() const { return head_size > 0 ? head_size : dim / heads; }
  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int position_rows() const { return positions > 0 ? positions : seq; }
  // The MLP's hidden width: 4C for gpt2; --ffn-dim or Llama's rounded 8C/3 for llama.
  int hidden() const;
  // The head multiplies the token table (always for gpt2).
  bool tied() const { return !llama() || tie_embeddings; }
  // Names of the token table and of the head's matrix (the same tensor when tied).
  const char* token_table_name() const;
  const char* head_weight_name() const;
  // Each routed expert's hidden width: 4C for gpt2 (the dense MLP's), Fe for llama.
  int expert_hidden() const;
  // The shared experts' SwiGLU width S * Fe (0: none; llama only).
  int shared_hidden() const { return llama() ? shared_experts * expert_hidden() : 0; }
  // Block i's MLP is a mixture of experts: --experts > 0, i >= --first-dense-layers and
  // (i + 1) % --moe-every == 0.
  bool is_moe(int layer) const {
    return experts > 0 && layer >= first_dense_layers && (layer + 1) % moe_every == 0;
  }
  // Throws UsageError naming the flag and what is allowed.
  void validate() const;
  // Blocks whose MLP is a mixture of experts (is_moe).
  int64_t moe_layers() const;
  // Parameters of the global model (tied embedding counted once, every expert counted).
  int64_t num_params() const;
  // Model FLOPs per token for one training step (forward + backward), as nanoGPT/PaLM count
  // them: 6 per active parameter (excluding the position table; a MoE layer's active
  // experts are topk of them) plus 12*L*T*(H*hd) for attention (12*L*T*C for gpt2).
  double flops_per_token() const;
  std::string describe() const;
};

}  // namespace mt
