// Token + position embedding (first pipeline stage). The token table doubles as the LM
// head (tied weights, CONTRACTS.md §1); the embedding has no input gradient, only weight
// gradients, which it computes in the W pass.
//
// Tensor parallelism: the token table is split by vocabulary rows (vocab_parallel.h);
// each rank looks up the ids it holds (0 for the others) and the partial rows are summed:
// an all-reduce, or under sequence parallelism a reduce-scatter that leaves each rank its
// rows of the sequence. The position table is replicated; rank 0 alone adds it, so the
// sum holds it once. The W pass sees the whole (gathered, under sequence parallelism)
// output gradient, so every rank computes the same position-table gradient.
#pragma once

#include "model/block.h"
#include "model/config.h"
#include "model/param_table.h"
#include "parallel/tensor_parallel/vocab_parallel.h"

namespace mt {

// transformer.wte.weight, split by vocabulary rows over tp (registered once; the embedding
// and the head share it).
const ParamInfo& register_token_table(const ModelConfig& cfg, const TensorParallelShard& tp,
                                      ParamTable& table);

class EmbeddingLayer {
 public:
  // Registers transformer.wte.weight [V, C] and transformer.wpe.weight [T, C].
  EmbeddingLayer(const ModelConfig& cfg, const TensorParallelShard& tp, ParamTable& table);
  void bind(float* params, float* grads);
  // x_out (b, T, C) = wte[tokens] + wpe[0..T-1]; under sequence parallelism x_out holds this
  // rank's b*T/t rows. scratch: (b*T, C) floats (sequence parallelism only).
  void forward(float* x_out, const int* tokens, int b, int T, float* scratch) const;
  // dwte, dwpe += from dx_out (b, T, C) (this rank's rows under sequence parallelism).
  void backward_weight(const float* dx_out, const int* tokens, int b, int T, float* scratch) const;

  const ParamInfo* wte_info() const { return wte_info_; }

 private:
  int C_, V_;
  TensorParallelShard tp_;
  tp::VocabShard shard_;
  const ParamInfo *wte_info_, *wpe_info_;
  const float *wte_ = nullptr, *wpe_ = nullptr;
  float *dwte_ = nullptr, *dwpe_ = nullptr;
};

}  // namespace mt
