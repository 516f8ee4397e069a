// Token + position embedding (first pipeline stage). The token table doubles as the LM
// head (tied weights, docs/contracts.md §1); the embedding has no input gradient, only weight
// gradients, which it computes in the W pass.
//
// This layer owns the parameter-table entries; the tensor-parallel lookup (the token
// table split by vocabulary rows, the partial rows summed over tp) is
// tensor_parallel/vocab_parallel_embedding.h.
#pragma once

#include "model/block.h"
#include "model/config.h"
#include "model/param_table.h"
#include "tensor_parallel/vocab_parallel_embedding.h"

namespace mt {

// The token table (transformer.wte.weight, model.embed_tokens.weight), split by vocabulary
// rows over tp (registered once; a tied head shares it).
const ParamInfo& register_token_table(const ModelConfig& cfg, const TensorParallelShard& tp,
                                      ParamTable& table);
// The matrix the head multiplies: the token table when tied, else lm_head.weight [V, C] split
// the same way.
const ParamInfo& register_head_matrix(const ModelConfig& cfg, const TensorParallelShard& tp,
                                      ParamTable& table);

class EmbeddingLayer {
 public:
  // Registers the token table [V, C] and, for gpt2, transformer.wpe.weight [T, C].
  // positions: the rows' true positions under context parallelism (the zigzag shard of the
  // whole sequence, whose T rows the table holds); null means 0..seq-1.
  EmbeddingLayer(const ModelConfig& cfg, const TensorParallelShard& tp, ParamTable& table,
                 const int* positions = nullptr);
  void bind(float* params, float* grads);
  // x_out (b, T, C) = wte[tokens] + wpe[positions]; under sequence parallelism x_out holds this
  // rank's b*T/t rows. scratch: (b*T, C) floats (sequence parallelism only).
  void forward(float* x_out, const int* tokens, int b, int T, float* scratch) const;
  // dwte, dwpe += from dx_out (b, T, C) (this rank's rows under sequence parallelism).
  void backward_weight(const float* dx_out, const int* tokens, int b, int T, float* scratch) const;

 private:
  tp::VocabParallelEmbedding lookup_;
  const ParamInfo *wte_info_ = nullptr, *wpe_info_ = nullptr;  // no wpe for llama
};

}  // namespace mt
