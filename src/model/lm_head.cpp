#include "model/lm_head.h"

#include <cstring>

#include "kernels/crossentropy.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace mt {

LMHead::LMHead(const ModelConfig& cfg, int max_b, ParamTable& table, SlotLayout& layout)
    : C_(cfg.dim), V_(cfg.vocab) {
  const ParamInfo* wte = table.find("transformer.wte.weight");
  wte_info_ = wte ? wte : &table.add("transformer.wte.weight", {V_, C_}, InitKind::normal);
  lnf_w_info_ = &table.add("transformer.ln_f.weight", {C_}, InitKind::ones);
  lnf_b_info_ = &table.add("transformer.ln_f.bias", {C_}, InitKind::zeros);
  const size_t N = size_t(max_b) * cfg.seq;
  off_.lnf_out = layout.reserve(N * C_);
  off_.mean = layout.reserve(N);
  off_.rstd = layout.reserve(N);
  off_.logits = layout.reserve(N * V_);
  off_.losses = layout.reserve(N);
  off_.d_lnf = layout.reserve(N * C_);
}

void LMHead::bind(float* params, float* grads) {
  lnf_w_ = params + lnf_w_info_->offset;
  lnf_b_ = params + lnf_b_info_->offset;
  wte_ = params + wte_info_->offset;
  dlnf_w_ = grads + lnf_w_info_->offset;
  dlnf_b_ = grads + lnf_b_info_->offset;
  dwte_ = grads + wte_info_->offset;
}

double LMHead::forward(float* s, const float* x_in, const int* targets, int b, int T,
                       float dloss) {
  const int N = b * T;
  float* lnf_out = s + off_.lnf_out;
  float* logits = s + off_.logits;
  float* losses = s + off_.losses;
  layernorm_forward(lnf_out, s + off_.mean, s + off_.rstd, x_in, lnf_w_, lnf_b_, N, C_);
  matmul_forward(logits, lnf_out, wte_, nullptr, N, C_, V_);  // (N, V) = lnf_out @ wte^T
  if (!targets) return 0.0;
  if (dloss != 0.f)
    crossentropy_forward_backward(losses, logits, targets, dloss, N, V_, V_);
  else
    crossentropy_forward(losses, logits, targets, N, V_, V_);
  // Summed in double and in a fixed order so the result is deterministic.
  double sum = 0;
  for (int n = 0; n < N; ++n) sum += losses[n];
  return sum;
}

void LMHead::backward_input(float* s, const float* x_in, float* dx_in, int b, int T) {
  const int N = b * T;
  float* d_lnf = s + off_.d_lnf;
  std::memset(d_lnf, 0, size_t(N) * C_ * sizeof(float));
  matmul_backward_input(d_lnf, s + off_.logits, wte_, N, C_, V_);
  std::memset(dx_in, 0, size_t(N) * C_ * sizeof(float));
  layernorm_backward_input(dx_in, d_lnf, x_in, lnf_w_, s + off_.mean, s + off_.rstd, N, C_);
}

void LMHead::backward_weight(float* s, const float* x_in, int b, int T) {
  const int N = b * T;
  matmul_backward_weight(dwte_, nullptr, s + off_.logits, s + off_.lnf_out, N, C_, V_);
  layernorm_backward_weight(dlnf_w_, dlnf_b_, s + off_.d_lnf, x_in, s + off_.mean, s + off_.rstd,
                            N, C_);
}

}  // namespace mt
