// The experts under --precision bf16 (expert_mlp.h, docs/precision.md): the GEMMs multiply
// bf16 copies of the experts' weights (converted once per change of the weights,
// kernels/bf16_weight.h) by bf16 rows with fp32 accumulation, and the slot keeps what only a
// GEMM reads in bf16, as the dense MLP does. The input and output-gradient rows arrive in
// fp32 (the caller's scratch) and are rounded into the slot once.
//   GELU:   x_rows, fc_out, dy_rows, d_fc bf16; fc_pre (GELU's input) fp32.
//   SwiGLU: x_rows, h, dy_rows, d_gu bf16; gu (SwiGLU's input) fp32.
//
// oneDNN builds (and its per-thread cache keeps) one primitive per GEMM shape, and an
// expert's row count changes with every microbatch's routing: the GEMMs run over chunks of
// kRowQuantum * 2^j rows, at most chunk_rows(max_tokens), plus a last one of fewer rows,
// which the forward and input-gradient GEMMs split as matmul_bf16_row_pieces does and the
// weight-gradient GEMMs zero-pad to kRowQuantum (Bf16RowChunks), so the shapes stay a
// handful per layer instead of one per distinct load. The stage holds one chunk: chunk_rows
// x H floats.
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "kernels/bf16.h"
#include "kernels/bf16_weight.h"
#include "model/expert_mlp.h"

namespace mt {

// The row chunks both kinds of bf16 experts run their GEMMs over.
class Bf16RowChunks {
 public:
  static constexpr int kRowQuantum = 64;
  static int chunk_rows(int max_tokens) {
    int rows = kRowQuantum;
    while (rows * 2 <= max_tokens) rows *= 2;
    return rows;
  }

  // width: the widest GEMM operand row (in or out) weight_gemm pads; dry: a dry run
  // (model/dry_model.h), the pad takes its size without memory.
  Bf16RowChunks(int max_tokens, int width, bool dry);
  int largest() const { return chunk_rows_; }
  size_t pad_floats() const { return pad_.size(); }
  // Calls f(r0, rb) over [0, rows) in chunks of kRowQuantum * 2^j rows (largest first, at
  // most largest()) and a last one of fewer than kRowQuantum rows.
  template <typename F>
  void for_each(int rows, F&& f) const {
    int r0 = 0;
    for (int size = chunk_rows_; size >= kRowQuantum; size /= 2)
      for (; rows - r0 >= size; r0 += size) f(r0, size);
    if (r0 < rows) f(r0, rows - r0);
  }
  // dw += dout^T @ inp, db += column sums of dout (db may be null), over rows in the same
  // chunks; a chunk under kRowQuantum rows runs as kRowQuantum rows through the zero-padded
  // pad buffers.
  void weight_gemm(float* dw, float* db, const bf16* dout, const bf16* inp, int rows, int in,
                   int out);

 private:
  int chunk_rows_;
  size_t width_;
  Arena pad_;  // two bf16 (kRowQuantum, width) operands
};

class Bf16GeluExperts final : public GeluExperts {
 public:
  Bf16GeluExperts(const ExpertShape& shape, const uint64_t* version, ParamTable& table,
                  SlotLayout& layout);

  float* input_rows(float*, float* scratch) const override { return scratch; }
  void forward(float* slot, const ExpertGroups& g, const float* x, float* y) override;
  float* grad_rows(float*, float* scratch) const override { return scratch; }
  void backward_input(float* slot, const ExpertGroups& g, const float* dy, float* dx) override;
  void backward_weight(float* slot, const ExpertGroups& g) override;

  size_t stage_floats() const override { return size_t(chunks_.largest()) * H_; }
  void set_stage(float* stage) override { stage_ = stage; }
  size_t weight_copy_bytes() const override;
  size_t own_workspace_floats() const override { return chunks_.pad_floats(); }

 private:
  static bf16* h16(float* s, size_t off) { return reinterpret_cast<bf16*>(s + off); }

  std::vector<Bf16Weight> fc16_, proj16_;  // per local expert
  float* stage_ = nullptr;                 // chunk_rows x H, shared (set_stage)
  Bf16RowChunks chunks_;
  // Offsets in a slot, R = shape.max_rows; fc_pre fp32, the others bf16.
  struct {
    size_t x_rows, fc_pre, fc_out, dy_rows, d_fc;  // (R,C) (R,H) (R,H) (R,C) (R,H)
  } off_{};
};

class Bf16SwigluExperts final : public SwigluExperts {
 public:
  Bf16SwigluExperts(const ExpertShape& shape, const uint64_t* version, ParamTable& table,
                    SlotLayout& layout);

  float* input_rows(float*, float* scratch) const override { return scratch; }
  void forward(float* slot, const ExpertGroups& g, const float* x, float* y) override;
  float* grad_rows(float*, float* scratch) const override { return scratch; }
  void backward_input(float* slot, const ExpertGroups& g, const float* dy, float* dx) override;
  void backward_weight(float* slot, const ExpertGroups& g) override;

  size_t stage_floats() const override { return size_t(chunks_.largest()) * H_; }
  void set_stage(float* stage) override { stage_ = stage; }
  size_t weight_copy_bytes() const override;
  size_t own_workspace_floats() const override { return chunks_.pad_floats(); }

 private:
  static bf16* h16(float* s, size_t off) { return reinterpret_cast<bf16*>(s + off); }

  std::vector<Bf16Weight> gate_up16_, down16_;  // per local expert
  float* stage_ = nullptr;                      // chunk_rows x H, shared (set_stage)
  Bf16RowChunks chunks_;
  // Offsets in a slot, R = shape.max_rows; gu fp32, the others bf16.
  struct {
    size_t x_rows, gu, h, dy_rows, d_gu;  // (R,C) (R,2H) (R,H) (R,C) (R,2H)
  } off_{};
};

}  // namespace mt
