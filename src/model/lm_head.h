// Final LayerNorm, tied LM head and mean cross-entropy (last pipeline stage).
// The loss gradient is produced in the forward pass (fused softmax-cross-entropy writes
// dlogits over the logits), since nothing after the loss can change it.
#pragma once

#include "model/activation_pool.h"
#include "model/config.h"
#include "model/param_table.h"

namespace mt {

class LMHead {
 public:
  // Registers transformer.ln_f.*; uses transformer.wte.weight (registers it when the
  // embedding lives on another stage: both stages then hold a copy).
  LMHead(const ModelConfig& cfg, int max_b, ParamTable& table, SlotLayout& layout);
  void bind(float* params, float* grads);

  // Returns the sum of per-token cross-entropies of targets (b, T) given x_in (b, T, C).
  // With dloss != 0 the slot keeps dlogits = dloss * (softmax - onehot) for backward.
  double forward(float* slot, const float* x_in, const int* targets, int b, int T, float dloss);
  // dx_in (b, T, C) = gradient w.r.t. x_in (overwrites).
  void backward_input(float* slot, const float* x_in, float* dx_in, int b, int T);
  // dwte, dln_f += (the W pass).
  void backward_weight(float* slot, const float* x_in, int b, int T);
  // logits (b*T, V) of the last forward, before the gradient overwrote them (sampling uses
  // forward with dloss == 0).
  const float* logits(float* slot) const { return slot + off_.logits; }

 private:
  int C_, V_;
  const ParamInfo *lnf_w_info_, *lnf_b_info_, *wte_info_;
  const float *lnf_w_ = nullptr, *lnf_b_ = nullptr, *wte_ = nullptr;
  float *dlnf_w_ = nullptr, *dlnf_b_ = nullptr, *dwte_ = nullptr;
  struct {
    size_t lnf_out, mean, rstd, logits, losses, d_lnf;  // (N,C) (N) (N) (N,V) (N) (N,C)
  } off_{};
};

}  // namespace mt
