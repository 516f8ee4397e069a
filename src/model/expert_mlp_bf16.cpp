#include "model/expert_mlp_bf16.h"

#include <algorithm>

#include "kernels/grouped_gemm.h"
#include "kernels/token_permutation.h"

namespace mt {

Bf16Experts::Bf16Experts(const ExpertShape& shape, const uint64_t* version, ParamTable& table,
                         SlotLayout& layout)
    : ExpertWeights(shape, table),
      up16_(up_, version),
      down16_(down_, version),
      stage_rows_(Bf16RowChunks::chunk_rows(shape.max_tokens)) {
  const size_t R = size_t(shape.max_rows), U = size_t(up_width());
  off_.x_rows = layout.reserve_bf16(R * C_);
  off_.pre = layout.reserve(R * U);
  off_.act = layout.reserve_bf16(R * H_);
  off_.dy_rows = layout.reserve_bf16(R * C_);
  off_.d_pre = layout.reserve_bf16(R * U);
}

void Bf16Experts::gather_input(float* s, const float* h, const int32_t* index, int M) {
  gather_rows(h16(s, off_.x_rows), h, index, M, C_);
}

void Bf16Experts::gather_grad(float* s, float* dgates, const float* dy, const float* y_rows,
                              const int32_t* row_of, const float* gates, int N, int k) {
  combine_rows_backward(dgates, h16(s, off_.dy_rows), dy, y_rows, row_of, gates, N, k, C_);
}

void Bf16Experts::forward(float* s, const ExpertGroups& g, const float* x32, float* y) {
  bf16* x = h16(s, off_.x_rows);
  const size_t r0 = size_t(g.first());
  if (x32) to_bf16(x + r0 * C_, x32 + r0 * C_, size_t(g.size()) * C_);
  forward_up(s, g);
  expert_gemm_forward(y, h16(s, off_.act), down_, down16_, g, biased());
}

void Bf16Experts::forward_up(float* s, const ExpertGroups& g) {
  const bf16* x = h16(s, off_.x_rows);
  float* pre = s + off_.pre;
  bf16* act = h16(s, off_.act);
  if (fuses_swiglu()) {
    expert_gemm_forward_swiglu(pre, act, x, up_, up16_, g);
  } else {
    expert_gemm_forward(pre, x, up_, up16_, g, /*with_bias=*/false);
    activate(act, pre, g);
  }
}

// No biases to add between the GEMM and the sum: SwiGLU experts only.
bool Bf16Experts::sums_into_tokens() const {
  return !biased() && fuses_swiglu() && grouped_bf16_sums_into_tokens();
}

void Bf16Experts::forward_into_tokens(float* s, const ExpertGroups& g, float* y_rows, float* tokens,
                                      const int32_t* token, const float* gate, int N) {
  MT_CHECK(sums_into_tokens(), "bf16 experts: no sums into token rows here");
  forward_up(s, g);
  std::fill(tokens, tokens + size_t(N) * C_, 0.0f);
  expert_gemm_forward_into_tokens(tokens, token, gate, y_rows, h16(s, off_.act), down_, down16_, g);
}

void Bf16Experts::backward_input_into_tokens(float* s, const ExpertGroups& g, float* tokens,
                                             const int32_t* token, int N) {
  MT_CHECK(sums_into_tokens(), "bf16 experts: no sums into token rows here");
  bf16* d_pre = h16(s, off_.d_pre);
  expert_gemm_backward_input_swiglu(d_pre, s + off_.pre, h16(s, off_.dy_rows), down_, down16_, g);
  std::fill(tokens, tokens + size_t(N) * C_, 0.0f);
  expert_gemm_backward_input_into_tokens(tokens, token, d_pre, up_, up16_, g);
}

void Bf16Experts::backward_input(float* s, const ExpertGroups& g, const float* dy32, float* dx) {
  bf16* dy = h16(s, off_.dy_rows);
  const size_t r0 = size_t(g.first());
  if (dy32) to_bf16(dy + r0 * C_, dy32 + r0 * C_, size_t(g.size()) * C_);
  const float* pre = s + off_.pre;
  bf16* d_pre = h16(s, off_.d_pre);
  const size_t U = size_t(up_width());
  if (fuses_swiglu()) {  // d_act stays in L1 (grouped_gemm.h, *_swiglu)
    expert_gemm_backward_input_swiglu(d_pre, pre, dy, down_, down16_, g);
    return expert_gemm_backward_input(dx, d_pre, up_, up16_, g, /*accumulate=*/false);
  }
  // Fine-grained experts (H <= C): d_act fits in dx's rows, free until the last GEMM writes
  // them, so the down GEMM runs whole (each piece would pack every expert's weight again).
  if (H_ <= C_) {
    expert_gemm_backward_input(dx, dy, down_, down16_, g, /*accumulate=*/false);
    activation_backward(d_pre + r0 * U, pre + r0 * U, dx + r0 * H_, g.size());
  } else {
    MT_CHECK(stage_ != nullptr, "bf16 experts: no stage set");
    for_each_row_piece(g, stage_rows_, [&](int r0, int rows, const ExpertGroups& piece) {
      const size_t r = size_t(r0);
      expert_gemm_backward_input(stage_, dy + r * C_, down_, down16_, piece, false);
      activation_backward(d_pre + r * U, pre + r * U, stage_, rows);
    });
  }
  expert_gemm_backward_input(dx, d_pre, up_, up16_, g, /*accumulate=*/false);
}

bool Bf16Experts::fuses_swiglu() const {
  return kind_ == ExpertKind::swiglu && grouped_bf16_fuses_swiglu(H_);
}

void Bf16Experts::backward_weight(float* s, const ExpertGroups* g, int count) {
  expert_gemm_backward_weight(down_, h16(s, off_.dy_rows), h16(s, off_.act), g, count, biased());
  expert_gemm_backward_weight(up_, h16(s, off_.d_pre), h16(s, off_.x_rows), g, count, biased());
}

ExpertMlp::KernelScratch Bf16Experts::kernel_scratch(int parts) const {
  // The per-thread row-block stage serves the SwiGLU backward's d_act (H wide) and, at ep 1,
  // the input gradients summed into tokens (C wide): it grows to the wider of the two.
  const size_t fused =
      kind_ == ExpertKind::swiglu ? grouped_bf16_swiglu_scratch_bytes(std::max(H_, C_)) : 0;
  return {fused, gather_scratch_bytes(parts, sizeof(bf16))};
}

}  // namespace mt
