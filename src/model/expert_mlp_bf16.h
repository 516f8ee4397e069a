// The experts under --precision bf16 (expert_mlp.h, docs/precision.md), either kind: the
// grouped GEMMs (expert_gemm.h) multiply bf16 copies of the experts' weights (converted once
// per change of the weights, kernels/bf16_weight.h) by bf16 rows with fp32 accumulation, and
// the slot keeps what only a GEMM reads in bf16, as the dense MLP does. The input and
// output-gradient rows arrive in fp32 (the caller's scratch, from an exchange) and are
// rounded into the slot once, or at ep = 1 are packed into it straight from the tokens
// (gather_input, gather_grad). Slot: x_rows, act, dy_rows, d_pre bf16; pre (the activation's input)
// fp32.
//   forward          pre = x up^T (fp32); act = activation(pre) rounded; y = act down^T
//   backward_input   d_act = dy down (fp32) into dx's rows when H <= C (they are free until
//                    the last GEMM), else per piece of at most stage rows into the stage;
//                    d_pre = activation'(pre) d_act rounded; then dx = d_pre up
// SwiGLU experts on the AMX path apply the activation in the stores of the GEMMs beside it
// (grouped_gemm.h, *_swiglu; the same bits): act is computed as pre's blocks leave the
// tiles, and d_act never leaves them (no dx rows, no stage).
//   backward_weight  d down += dy^T act; d up += d_pre^T x (and the GELU experts' biases)
// The stage (shared with the chunk's other layers) holds stage_rows(max_tokens) x H floats:
// the grouped GEMMs need no fixed row shapes, so only the fp32 d_act of wide experts goes
// through it, in pieces; a row's bits do not depend on its piece (expert_gemm.h).
#pragma once

#include <cstdint>

#include "model/expert_gemm.h"
#include "model/expert_mlp.h"

namespace mt {

// The rows of the bf16 experts' fp32 stage: the largest kRowQuantum * 2^j not over the
// microbatch's tokens (MoeLayer::bf16_chunk_rows).
struct Bf16RowChunks {
  static constexpr int kRowQuantum = 64;
  static int chunk_rows(int max_tokens) {
    int rows = kRowQuantum;
    while (rows * 2 <= max_tokens) rows *= 2;
    return rows;
  }
};

class Bf16Experts final : public ExpertWeights {
 public:
  Bf16Experts(const ExpertShape& shape, const uint64_t* version, ParamTable& table,
              SlotLayout& layout);

  float* input_rows(float*, float* scratch) const override { return scratch; }
  void gather_input(float* slot, const float* h, const int32_t* index, int M) override;
  void forward(float* slot, const ExpertGroups& g, const float* x, float* y) override;
  float* grad_rows(float*, float* scratch) const override { return scratch; }
  void gather_grad(float* slot, float* dgates, const float* dy, const float* y_rows,
                   const int32_t* row_of, const float* gates, int N, int k) override;
  void backward_input(float* slot, const ExpertGroups& g, const float* dy, float* dx) override;
  void backward_weight(float* slot, const ExpertGroups* g, int count) override;
  bool sums_in_row_order() const override { return true; }
  bool sums_into_tokens() const override;
  void forward_into_tokens(float* slot, const ExpertGroups& g, float* y_rows, float* tokens,
                           const int32_t* token, const float* gate, int N) override;
  void backward_input_into_tokens(float* slot, const ExpertGroups& g, float* tokens,
                                  const int32_t* token, int N) override;

  // Only wide experts' unfused d_act goes through the stage (backward_input): none where
  // H <= C (dx's rows hold it) or SwiGLU runs fused, so none is reserved there.
  size_t stage_floats() const override {
    return H_ > C_ && !fuses_swiglu() ? size_t(stage_rows_) * H_ : 0;
  }
  void set_stage(float* stage) override { stage_ = stage; }
  size_t weight_copy_bytes() const override { return up16_.bytes() + down16_.bytes(); }
  // The fused SwiGLU backward's d_act block per thread (counted on every CPU, as the packs
  // are), and the weight gradients' gather over several parts.
  KernelScratch kernel_scratch(int parts) const override;

 private:
  static bf16* h16(float* s, size_t off) { return reinterpret_cast<bf16*>(s + off); }
  // SwiGLU experts on a path whose GEMMs apply it in their store (grouped_gemm.h, *_swiglu).
  bool fuses_swiglu() const;
  // forward's first GEMM and activation: act from x (bf16 rows in the slot).
  void forward_up(float* slot, const ExpertGroups& g);

  Bf16ExpertWeights up16_, down16_;
  int stage_rows_;
  float* stage_ = nullptr;  // stage_rows_ x H, shared (set_stage)
  // Offsets in a slot, R = shape.max_rows; pre fp32, the others bf16.
  struct {
    size_t x_rows, pre, act, dy_rows, d_pre;  // (R,C) (R,U) (R,H) (R,C) (R,U)
  } off_{};
};

}  // namespace mt
