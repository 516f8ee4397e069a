// The experts in fp32 (expert_mlp.h), either kind: their GEMMs are grouped over all local
// experts (expert_gemm.h) around the activation; every buffer the backward reads stays fp32
// in the slot.
//   forward          pre = x up^T (R, U); act = activation(pre) (R, H); y = act down^T
//   backward_input   d_act = dy down (R, H); d_pre = activation'(pre) d_act (R, U);
//                    dx = d_pre up
//   backward_weight  d down += dy^T act; d up += d_pre^T x (and the GELU experts' biases)
#pragma once

#include "core/arena.h"
#include "model/expert_mlp.h"

namespace mt {

class Fp32Experts final : public ExpertWeights {
 public:
  Fp32Experts(const ExpertShape& shape, ParamTable& table, SlotLayout& layout);

  // The rows land where they are kept for W: no scratch, no copy.
  float* input_rows(float* slot, float*) const override { return slot + off_.x_rows; }
  void gather_input(float* slot, const float* h, const int32_t* index, int M) override;
  void forward(float* slot, const ExpertGroups& g, const float* x, float* y) override;
  float* grad_rows(float* slot, float*) const override { return slot + off_.dy_rows; }
  void gather_grad(float* slot, float* dgates, const float* dy, const float* y_rows,
                   const int32_t* row_of, const float* gates, int N, int k) override;
  void backward_input(float* slot, const ExpertGroups& g, const float* dy, float* dx) override;
  void backward_weight(float* slot, const ExpertGroups* g, int count) override;
  // d_act_, which the memory estimate's dry run counts through this (it was left out once).
  size_t own_workspace_floats() const override { return d_act_.size(); }
  KernelScratch kernel_scratch(int parts) const override {
    return {0, gather_scratch_bytes(parts, sizeof(float))};
  }

 private:
  // Offsets in a slot, R = shape.max_rows: (R,C) (R,U) (R,H) (R,C) (R,U).
  struct {
    size_t x_rows, pre, act, dy_rows, d_pre;
  } off_{};
  // (R, H): SwiGLU's output gradient during backward_input only (GELU's is d_pre itself).
  Arena d_act_;
};

}  // namespace mt
