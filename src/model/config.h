// GPT model hyper-parameters (CONTRACTS.md §1) and their validation.
#pragma once

#include <cstdint>
#include <string>

namespace mt {

struct ModelConfig {
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
  // Mixture of experts (0 = dense). Math in CONTRACTS.md §1, MoE variant.
  int experts = 0;
  int topk = 2;
  int moe_every = 1;
  float capacity_factor = 0;
  float aux_loss_coef = 0.01f;
  float router_bias_update = 0;

  int head_dim() const { return dim / heads; }
  int position_rows() const { return positions > 0 ? positions : seq; }
  int hidden() const { return 4 * dim; }
  // Throws UsageError naming the flag and what is allowed.
  void validate() const;
  // Blocks whose MLP is a mixture of experts (block i when (i+1) % moe_every == 0).
  int64_t moe_layers() const;
  // Parameters of the global model (tied embedding counted once, every expert counted).
  int64_t num_params() const;
  // Model FLOPs per token for one training step (forward + backward), as nanoGPT/PaLM count
  // them: 6 per active parameter (excluding the position table; a MoE layer's active
  // experts are topk of them) plus 12*L*T*C for attention.
  double flops_per_token() const;
  std::string describe() const;
};

}  // namespace mt
