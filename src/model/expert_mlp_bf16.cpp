#include "model/expert_mlp_bf16.h"

#include <algorithm>
#include <cstring>

#include "kernels/gelu.h"
#include "kernels/matmul_bf16.h"
#include "kernels/swiglu.h"

namespace mt {

Bf16RowChunks::Bf16RowChunks(int max_tokens, int width, bool dry)
    : chunk_rows_(chunk_rows(max_tokens)),
      width_(size_t(width)),
      pad_(kRowQuantum * width_, dry ? Arena::Mode::dry : Arena::Mode::allocate) {}

void Bf16RowChunks::weight_gemm(float* dw, float* db, const bf16* dout, const bf16* inp, int rows,
                                int in, int out) {
  const size_t q = kRowQuantum;
  for_each(rows, [&](int r0, int rb) {
    const bf16* d = dout + size_t(r0) * out;
    const bf16* x = inp + size_t(r0) * in;
    // The rows are the reduction here: a chunk under kRowQuantum rows runs as kRowQuantum
    // (zero rows add nothing to dw and db) rather than as a new shape per row count.
    if (rb < kRowQuantum) {
      bf16* d_pad = reinterpret_cast<bf16*>(pad_.data());
      bf16* x_pad = d_pad + q * width_;
      std::memcpy(d_pad, d, size_t(rb) * out * sizeof(bf16));
      std::memset(d_pad + size_t(rb) * out, 0, (q - rb) * out * sizeof(bf16));
      std::memcpy(x_pad, x, size_t(rb) * in * sizeof(bf16));
      std::memset(x_pad + size_t(rb) * in, 0, (q - rb) * in * sizeof(bf16));
      d = d_pad, x = x_pad, rb = kRowQuantum;
    }
    matmul_bf16_backward_weight(dw, db, d, x, rb, in, out);
  });
}

// ---- GELU experts ----------------------------------------------------------------------

Bf16GeluExperts::Bf16GeluExperts(const ExpertShape& shape, const uint64_t* version,
                                 ParamTable& table, SlotLayout& layout)
    : GeluExperts(shape, table),
      chunks_(shape.max_tokens, std::max(shape.dim, shape.hidden), shape.dry) {
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
}

size_t Bf16GeluExperts::weight_copy_bytes() const {
  size_t bytes = 0;
  for (int le = 0; le < El_; ++le) bytes += fc16_[le].bytes() + proj16_[le].bytes();
  return bytes;
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
    chunks_.for_each(rows, [&](int r0, int rb) {
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
    chunks_.for_each(rows, [&](int r0, int rb) {
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
    chunks_.weight_gemm(proj_[le].dw, proj_[le].db, dy + o * C_, fc_out + o * H_, rows, H_, C_);
    chunks_.weight_gemm(fc_[le].dw, fc_[le].db, d_fc + o * H_, x + o * C_, rows, C_, H_);
  }
}

// ---- SwiGLU experts --------------------------------------------------------------------

Bf16SwigluExperts::Bf16SwigluExperts(const ExpertShape& shape, const uint64_t* version,
                                     ParamTable& table, SlotLayout& layout)
    : SwigluExperts(shape, table),
      chunks_(shape.max_tokens, std::max(shape.dim, 2 * shape.hidden), shape.dry) {
  const size_t R = size_t(shape.max_rows);
  off_.x_rows = layout.reserve_bf16(R * C_);
  off_.gu = layout.reserve(R * 2 * H_);
  off_.h = layout.reserve_bf16(R * H_);
  off_.dy_rows = layout.reserve_bf16(R * C_);
  off_.d_gu = layout.reserve_bf16(R * 2 * H_);
  for (int le = 0; le < El_; ++le) {
    gate_up16_.emplace_back(size_t(2 * H_) * C_, version);
    down16_.emplace_back(size_t(C_) * H_, version);
  }
}

size_t Bf16SwigluExperts::weight_copy_bytes() const {
  size_t bytes = 0;
  for (int le = 0; le < El_; ++le) bytes += gate_up16_[le].bytes() + down16_[le].bytes();
  return bytes;
}

// The rows rounded into the slot once; then per chunk: [gate; up] (fp32 out, kept for
// SwiGLU's backward), SwiGLU rounded into h as it is stored, then down_proj.
void Bf16SwigluExperts::forward(float* s, const ExpertGroups& g, const float* x32, float* y) {
  bf16* x = h16(s, off_.x_rows);
  to_bf16(x, x32, size_t(g.total()) * C_);
  float* gu = s + off_.gu;
  bf16* h = h16(s, off_.h);
  for (int le = 0; le < El_; ++le) {
    const int rows = g.rows(le);
    if (rows == 0) continue;
    const bf16* w_gu = gate_up16_[le].get(gate_up_[le].w);
    const bf16* w_down = down16_[le].get(down_[le].w);
    chunks_.for_each(rows, [&](int r0, int rb) {
      const size_t r = size_t(g.begin(le)) + r0;
      matmul_bf16_forward(gu + r * 2 * H_, x + r * C_, w_gu, nullptr, rb, C_, 2 * H_);
      swiglu_forward_bf16(h + r * H_, gu + r * 2 * H_, rb, H_);
      matmul_bf16_forward(y + r * C_, h + r * H_, w_down, nullptr, rb, H_, C_);
    });
  }
}

// The output gradients rounded into the slot once; then per chunk: down_proj's input
// gradient into the stage, SwiGLU's backward rounded into d_gu (W reads it too), then the
// input gradient through [gate; up].
void Bf16SwigluExperts::backward_input(float* s, const ExpertGroups& g, const float* dy32,
                                       float* dx) {
  MT_CHECK(stage_ != nullptr, "bf16 experts: no stage set");
  bf16* dy = h16(s, off_.dy_rows);
  to_bf16(dy, dy32, size_t(g.total()) * C_);
  const float* gu = s + off_.gu;
  bf16* d_gu = h16(s, off_.d_gu);
  for (int le = 0; le < El_; ++le) {
    const int rows = g.rows(le);
    if (rows == 0) continue;
    const bf16* w_gu = gate_up16_[le].get(gate_up_[le].w);
    const bf16* w_down = down16_[le].get(down_[le].w);
    chunks_.for_each(rows, [&](int r0, int rb) {
      const size_t r = size_t(g.begin(le)) + r0;
      matmul_bf16_backward_input(stage_, dy + r * C_, w_down, rb, H_, C_, /*accumulate=*/false);
      swiglu_backward_bf16(d_gu + r * 2 * H_, gu + r * 2 * H_, stage_, rb, H_);
      matmul_bf16_backward_input(dx + r * C_, d_gu + r * 2 * H_, w_gu, rb, C_, 2 * H_,
                                 /*accumulate=*/false);
    });
  }
}

void Bf16SwigluExperts::backward_weight(float* s, const ExpertGroups& g) {
  const bf16* x = h16(s, off_.x_rows);
  const bf16* h = h16(s, off_.h);
  const bf16* dy = h16(s, off_.dy_rows);
  const bf16* d_gu = h16(s, off_.d_gu);
  for (int le = 0; le < El_; ++le) {
    const int rows = g.rows(le);
    const size_t o = size_t(g.begin(le));
    if (rows == 0) continue;
    chunks_.weight_gemm(down_[le].dw, nullptr, dy + o * C_, h + o * H_, rows, H_, C_);
    chunks_.weight_gemm(gate_up_[le].dw, nullptr, d_gu + o * 2 * H_, x + o * C_, rows, C_, 2 * H_);
  }
}

}  // namespace mt
