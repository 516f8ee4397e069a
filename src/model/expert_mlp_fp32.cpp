#include "model/expert_mlp_fp32.h"

#include <cstring>

#include "kernels/gelu.h"
#include "kernels/swiglu.h"
#include "model/expert_gemm.h"

namespace mt {

Fp32GeluExperts::Fp32GeluExperts(const ExpertShape& shape, ParamTable& table, SlotLayout& layout)
    : GeluExperts(shape, table) {
  const size_t R = size_t(shape.max_rows);
  off_.x_rows = layout.reserve(R * C_);
  off_.fc_pre = layout.reserve(R * H_);
  off_.fc_out = layout.reserve(R * H_);
  off_.dy_rows = layout.reserve(R * C_);
  off_.d_fc = layout.reserve(R * H_);
}

// c_fc without its bias, then bias + GELU per expert (each its own bias), then c_proj with.
void Fp32GeluExperts::forward(float* s, const ExpertGroups& g, const float* x, float* y) {
  float* fc_pre = s + off_.fc_pre;
  float* fc_out = s + off_.fc_out;
  expert_gemm_forward(fc_pre, x, fc_, g, /*with_bias=*/false);
  for (int le = 0; le < El_; ++le) {
    const size_t o = size_t(g.begin(le));
    if (g.rows(le) > 0)
      bias_gelu_forward(fc_out + o * H_, fc_pre + o * H_, fc_[le].b, g.rows(le), H_);
  }
  expert_gemm_forward(y, fc_out, proj_, g, /*with_bias=*/true);
}

void Fp32GeluExperts::backward_input(float* s, const ExpertGroups& g, const float* dy, float* dx) {
  const float* fc_pre = s + off_.fc_pre;
  float* d_fc = s + off_.d_fc;
  const size_t R = size_t(g.total());
  std::memset(d_fc, 0, R * H_ * sizeof(float));
  std::memset(dx, 0, R * C_ * sizeof(float));
  expert_gemm_backward_input(d_fc, dy, proj_, g);
  for (int le = 0; le < El_; ++le) {
    const size_t o = size_t(g.begin(le));
    if (g.rows(le) > 0)
      gelu_backward(d_fc + o * H_, fc_pre + o * H_, d_fc + o * H_, size_t(g.rows(le)) * H_);
  }
  expert_gemm_backward_input(dx, d_fc, fc_, g);
}

void Fp32GeluExperts::backward_weight(float* s, const ExpertGroups& g) {
  expert_gemm_backward_weight(proj_, s + off_.dy_rows, s + off_.fc_out, g, /*with_bias=*/true);
  expert_gemm_backward_weight(fc_, s + off_.d_fc, s + off_.x_rows, g, /*with_bias=*/true);
}

Fp32SwigluExperts::Fp32SwigluExperts(const ExpertShape& shape, ParamTable& table,
                                     SlotLayout& layout)
    : SwigluExperts(shape, table) {
  const size_t R = size_t(shape.max_rows);
  off_.x_rows = layout.reserve(R * C_);
  off_.gu = layout.reserve(R * 2 * H_);
  off_.h = layout.reserve(R * H_);
  off_.dy_rows = layout.reserve(R * C_);
  off_.d_gu = layout.reserve(R * 2 * H_);
  dh_.resize(R * H_);
}

void Fp32SwigluExperts::forward(float* s, const ExpertGroups& g, const float* x, float* y) {
  float* gu = s + off_.gu;
  float* h = s + off_.h;
  expert_gemm_forward(gu, x, gate_up_, g, /*with_bias=*/false);
  swiglu_forward(h, gu, g.total(), H_);  // elementwise: one call over every expert's rows
  expert_gemm_forward(y, h, down_, g, /*with_bias=*/false);
}

// dh = dy down (R, H) into the layer's own scratch, SwiGLU's backward into d_gu (kept for
// W), then the input gradient through [gate; up].
void Fp32SwigluExperts::backward_input(float* s, const ExpertGroups& g, const float* dy,
                                       float* dx) {
  const size_t R = size_t(g.total());
  float* dh = dh_.data();
  float* d_gu = s + off_.d_gu;
  std::memset(dh, 0, R * H_ * sizeof(float));
  std::memset(dx, 0, R * C_ * sizeof(float));
  expert_gemm_backward_input(dh, dy, down_, g);
  swiglu_backward(d_gu, s + off_.gu, dh, int(R), H_, /*accumulate=*/false);
  expert_gemm_backward_input(dx, d_gu, gate_up_, g);
}

void Fp32SwigluExperts::backward_weight(float* s, const ExpertGroups& g) {
  expert_gemm_backward_weight(down_, s + off_.dy_rows, s + off_.h, g, /*with_bias=*/false);
  expert_gemm_backward_weight(gate_up_, s + off_.d_gu, s + off_.x_rows, g, /*with_bias=*/false);
}

}  // namespace mt
