// Token + position embedding (first pipeline stage). The token table doubles as the LM
// head (tied weights, CONTRACTS.md §1); the embedding has no input gradient, only weight
// gradients, which it computes in the W pass.
#pragma once

#include "model/config.h"
#include "model/param_table.h"

namespace mt {

class EmbeddingLayer {
 public:
  // Registers transformer.wte.weight [V, C] and transformer.wpe.weight [T, C].
  EmbeddingLayer(const ModelConfig& cfg, ParamTable& table);
  void bind(float* params, float* grads);
  // x_out (b, T, C) = wte[tokens] + wpe[0..T-1]
  void forward(float* x_out, const int* tokens, int b, int T) const;
  // dwte, dwpe += from dx_out (b, T, C)
  void backward_weight(const float* dx_out, const int* tokens, int b, int T) const;

  const ParamInfo* wte_info() const { return wte_info_; }

 private:
  int C_, V_;
  const ParamInfo *wte_info_, *wpe_info_;
  const float *wte_ = nullptr, *wpe_ = nullptr;
  float *dwte_ = nullptr, *dwpe_ = nullptr;
};

}  // namespace mt
