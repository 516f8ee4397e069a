#include "model/expert_mlp_bf16.h"

#include <algorithm>
#include <cstring>

#include "kernels/gelu.h"
#include "kernels/matmul_bf16.h"

namespace mt {

Bf16GeluExperts::Bf16GeluExperts(const ExpertShape& shape, const uint64_t* version,
                                 ParamTable& table, SlotLayout& layout)
    : GeluExperts(shape, table), chunk_rows_(chunk_rows(shape.max_tokens)) {
  const size_t R = size_t(shape.max_rows);
  off_.x_rows = layout.reserve_bf16(R * C_);
  off_.fc_pre = layout.reserve(R * H_);
  off_.fc_out = layout.reserve_bf16(R * H_);
  off_.dy_rows = layout.reserve_bf16(R * C_);
  off_.d_fc = layout.reserve_bf16(R * H_);
  for (int le = 0; le < El_; ++le) {
    fc16_.emplace_back(size_t(H_) * C_, version);
    proj16_.emplace_back(size_t(C_) * H_, version);
  }
  // Two bf16 (q, width) operands.
  pad_ = Arena(kRowQuantum * size_t(std::max(C_, H_)),
               shape.dry ? Arena::Mode::dry : Arena::Mode::allocate);
}

size_t Bf16GeluExperts::weight_copy_bytes() const {
  size_t bytes = 0;
  for (int le = 0; le < El_; ++le) bytes += fc16_[le].bytes() + proj16_[le].bytes();
  return bytes;
}

template <typename F>
void Bf16GeluExperts::for_row_chunks(int rows, F&& f) const {
  int r0 = 0;
  for (int size = chunk_rows_; size >= kRowQuantum; size /= 2)
    for (; rows - r0 >= size; r0 += size) f(r0, size);
  if (r0 < rows) f(r0, rows - r0);
}

void Bf16GeluExperts::weight_gemm(float* dw, float* db, const bf16* dout, const bf16* inp, int rows,
                                  int in, int out) {
  const size_t q = kRowQuantum, width = size_t(std::max(C_, H_));
  for_row_chunks(rows, [&](int r0, int rb) {
    const bf16* d = dout + size_t(r0) * out;
    const bf16* x = inp + size_t(r0) * in;
    // The rows are the reduction here: a chunk under kRowQuantum rows runs as kRowQuantum
    // (zero rows add nothing to dw and db) rather than as a new shape per row count.
    if (rb < kRowQuantum) {
      bf16* d_pad = h16(pad_.data(), 0);
      bf16* x_pad = d_pad + q * width;
      std::memcpy(d_pad, d, size_t(rb) * out * sizeof(bf16));
      std::memset(d_pad + size_t(rb) * out, 0, (q - rb) * out * sizeof(bf16));
      std::memcpy(x_pad, x, size_t(rb) * in * sizeof(bf16));
      std::memset(x_pad + size_t(rb) * in, 0, (q - rb) * in * sizeof(bf16));
      d = d_pad, x = x_pad, rb = kRowQuantum;
    }
    matmul_bf16_backward_weight(dw, db, d, x, rb, in, out);
  });
}

// The rows rounded into the slot once; then per chunk of an expert's rows: fc (fp32 out,
// kept for GELU's backward), bias + GELU into the stage, rounded into fc_out, then c_proj
// with its bias.
void Bf16GeluExperts::forward(float* s, const ExpertGroups& g, const float* x32, float* y) {
  MT_CHECK(stage_ != nullptr, "bf16 experts: no stage set");
  bf16* x = h16(s, off_.x_rows);
  to_bf16(x, x32, size_t(g.total()) * C_);
  float* fc_pre = s + off_.fc_pre;
  bf16* fc_out = h16(s, off_.fc_out);
  for (int le = 0; le < El_; ++le) {
    const int rows = g.rows(le);
    if (rows == 0) continue;
    const bf16* w_fc = fc16_[le].get(fc_[le].w);
    const bf16* w_proj = proj16_[le].get(proj_[le].w);
    const float* b_proj = proj_[le].b;
    for_row_chunks(rows, [&](int r0, int rb) {
      const size_t r = size_t(g.begin(le)) + r0;
      matmul_bf16_forward(fc_pre + r * H_, x + r * C_, w_fc, nullptr, rb, C_, H_);
      bias_gelu_forward(stage_, fc_pre + r * H_, fc_[le].b, rb, H_);
      to_bf16(fc_out + r * H_, stage_, size_t(rb) * H_);
      matmul_bf16_forward(y + r * C_, fc_out + r * H_, w_proj, b_proj, rb, H_, C_);
    });
  }
}

// The output gradients rounded into the slot once; then per chunk: c_proj's input gradient
// into the stage, through GELU's backward, rounded into d_fc (W reads it too), then fc's
// input gradient. Every row belongs to an expert, so the overwriting GEMMs leave nothing to
// clear.
void Bf16GeluExperts::backward_input(float* s, const ExpertGroups& g, const float* dy32,
                                     float* dx) {
  bf16* dy = h16(s, off_.dy_rows);
  to_bf16(dy, dy32, size_t(g.total()) * C_);
  const float* fc_pre = s + off_.fc_pre;
  bf16* d_fc = h16(s, off_.d_fc);
  for (int le = 0; le < El_; ++le) {
    const int rows = g.rows(le);
    if (rows == 0) continue;
    const bf16* w_fc = fc16_[le].get(fc_[le].w);
    const bf16* w_proj = proj16_[le].get(proj_[le].w);
    for_row_chunks(rows, [&](int r0, int rb) {
      const size_t r = size_t(g.begin(le)) + r0;
      matmul_bf16_backward_input(stage_, dy + r * C_, w_proj, rb, H_, C_, /*accumulate=*/false);
      gelu_backward(stage_, fc_pre + r * H_, stage_, size_t(rb) * H_);
      to_bf16(d_fc + r * H_, stage_, size_t(rb) * H_);
      matmul_bf16_backward_input(dx + r * C_, d_fc + r * H_, w_fc, rb, C_, H_,
                                 /*accumulate=*/false);
    });
  }
}

void Bf16GeluExperts::backward_weight(float* s, const ExpertGroups& g) {
  const bf16* x = h16(s, off_.x_rows);
  const bf16* fc_out = h16(s, off_.fc_out);
  const bf16* dy = h16(s, off_.dy_rows);
  const bf16* d_fc = h16(s, off_.d_fc);
  for (int le = 0; le < El_; ++le) {
    const int rows = g.rows(le);
    const size_t o = size_t(g.begin(le));
    if (rows == 0) continue;
    weight_gemm(proj_[le].dw, proj_[le].db, dy + o * C_, fc_out + o * H_, rows, H_, C_);
    weight_gemm(fc_[le].dw, fc_[le].db, d_fc + o * H_, x + o * C_, rows, C_, H_);
  }
}

}  // namespace mt
