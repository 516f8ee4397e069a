#include "model/expert_mlp_fp32.h"

#include <cstring>

#include "kernels/gelu.h"

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

void Fp32GeluExperts::forward(float* s, const ExpertGroups& g, const float* x, float* y) {
  float* fc_pre = s + off_.fc_pre;
  float* fc_out = s + off_.fc_out;
  for (int le = 0; le < El_; ++le) {
    const int rows = g.rows(le);
    const size_t o = size_t(g.begin(le));
    if (rows == 0) continue;
    fc_[le].forward(fc_pre + o * H_, x + o * C_, rows, /*with_bias=*/false);
    bias_gelu_forward(fc_out + o * H_, fc_pre + o * H_, fc_[le].b, rows, H_);
    proj_[le].forward(y + o * C_, fc_out + o * H_, rows);
  }
}

void Fp32GeluExperts::backward_input(float* s, const ExpertGroups& g, const float* dy, float* dx) {
  const float* fc_pre = s + off_.fc_pre;
  float* d_fc = s + off_.d_fc;
  const size_t R = size_t(g.total());
  std::memset(d_fc, 0, R * H_ * sizeof(float));
  std::memset(dx, 0, R * C_ * sizeof(float));
  for (int le = 0; le < El_; ++le) {
    const int rows = g.rows(le);
    const size_t o = size_t(g.begin(le));
    if (rows == 0) continue;
    proj_[le].backward_input(d_fc + o * H_, dy + o * C_, rows);
    gelu_backward(d_fc + o * H_, fc_pre + o * H_, d_fc + o * H_, size_t(rows) * H_);
    fc_[le].backward_input(dx + o * C_, d_fc + o * H_, rows);
  }
}

void Fp32GeluExperts::backward_weight(float* s, const ExpertGroups& g) {
  for (int le = 0; le < El_; ++le) {
    const int rows = g.rows(le);
    const size_t o = size_t(g.begin(le));
    if (rows == 0) continue;
    proj_[le].backward_weight(s + off_.dy_rows + o * C_, s + off_.fc_out + o * H_, rows);
    fc_[le].backward_weight(s + off_.d_fc + o * H_, s + off_.x_rows + o * C_, rows);
  }
}

}  // namespace mt
