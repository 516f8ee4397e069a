#include "model/expert_mlp_fp32.h"

#include "kernels/token_permutation.h"
#include "model/expert_gemm.h"

namespace mt {

Fp32Experts::Fp32Experts(const ExpertShape& shape, ParamTable& table, SlotLayout& layout)
    : ExpertWeights(shape, table) {
  const size_t R = size_t(shape.max_rows), U = size_t(up_width());
  off_.x_rows = layout.reserve(R * C_);
  off_.pre = layout.reserve(R * U);
  off_.act = layout.reserve(R * H_);
  off_.dy_rows = layout.reserve(R * C_);
  off_.d_pre = layout.reserve(R * U);
  if (kind_ == ExpertKind::swiglu)
    d_act_ = Arena(R * H_, shape.dry ? Arena::Mode::dry : Arena::Mode::allocate);
}

void Fp32Experts::gather_input(float* s, const float* h, const int32_t* index, int M) {
  gather_rows(s + off_.x_rows, h, index, M, C_);
}

void Fp32Experts::gather_grad(float* s, float* dgates, const float* dy, const float* y_rows,
                              const int32_t* row_of, const float* gates, int N, int k) {
  combine_rows_backward(dgates, s + off_.dy_rows, dy, y_rows, row_of, gates, N, k, C_);
}

// up without its bias (GELU adds c_fc's before the activation), then down with its own. The
// input rows are the slot's (input_rows) whether x names them or is null.
void Fp32Experts::forward(float* s, const ExpertGroups& g, const float* x, float* y) {
  if (!x) x = s + off_.x_rows;
  float* pre = s + off_.pre;
  float* act = s + off_.act;
  expert_gemm_forward(pre, x, up_, g, /*with_bias=*/false);
  activate(act, pre, g);
  expert_gemm_forward(y, act, down_, g, biased());
}

// Under GELU the activation's output gradient goes in place into d_pre (U = H); SwiGLU's
// into the layer's own d_act. Every row belongs to an expert, so the overwriting GEMMs leave
// nothing to clear.
void Fp32Experts::backward_input(float* s, const ExpertGroups& g, const float* dy, float* dx) {
  if (!dy) dy = s + off_.dy_rows;
  float* d_pre = s + off_.d_pre;
  float* d_act = kind_ == ExpertKind::swiglu ? d_act_.data() : d_pre;
  const size_t r0 = size_t(g.first()), U = size_t(up_width());
  expert_gemm_backward_input(d_act, dy, down_, g, /*accumulate=*/false);
  activation_backward(d_pre + r0 * U, s + off_.pre + r0 * U, d_act + r0 * H_, g.size());
  expert_gemm_backward_input(dx, d_pre, up_, g, /*accumulate=*/false);
}

void Fp32Experts::backward_weight(float* s, const ExpertGroups* g, int count) {
  expert_gemm_backward_weight(down_, s + off_.dy_rows, s + off_.act, g, count, biased());
  expert_gemm_backward_weight(up_, s + off_.d_pre, s + off_.x_rows, g, count, biased());
}

}  // namespace mt
