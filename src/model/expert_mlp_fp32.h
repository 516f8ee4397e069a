// The experts in fp32 (expert_mlp.h): their GEMMs through expert_gemm.h (one per expert
// today, one grouped GEMM once a kernel does it) around the dense MLP's elementwise kernels;
// every buffer the backward reads stays fp32 in the slot.
#pragma once

#include "core/arena.h"
#include "model/expert_mlp.h"

namespace mt {

class Fp32GeluExperts final : public GeluExperts {
 public:
  Fp32GeluExperts(const ExpertShape& shape, ParamTable& table, SlotLayout& layout);

  // The rows land where they are kept for W: no scratch, no copy.
  float* input_rows(float* slot, float*) const override { return slot + off_.x_rows; }
  void forward(float* slot, const ExpertGroups& g, const float* x, float* y) override;
  float* grad_rows(float* slot, float*) const override { return slot + off_.dy_rows; }
  void backward_input(float* slot, const ExpertGroups& g, const float* dy, float* dx) override;
  void backward_weight(float* slot, const ExpertGroups& g) override;

 private:
  // Offsets in a slot, R = shape.max_rows: (R,C) (R,H) (R,H) (R,C) (R,H).
  struct {
    size_t x_rows, fc_pre, fc_out, dy_rows, d_fc;
  } off_{};
};

// SwiGLU experts: gu = x [gate; up]^T (R, 2H), h = silu(gate) * up (R, H), y = h down^T.
class Fp32SwigluExperts final : public SwigluExperts {
 public:
  Fp32SwigluExperts(const ExpertShape& shape, ParamTable& table, SlotLayout& layout);

  float* input_rows(float* slot, float*) const override { return slot + off_.x_rows; }
  void forward(float* slot, const ExpertGroups& g, const float* x, float* y) override;
  float* grad_rows(float* slot, float*) const override { return slot + off_.dy_rows; }
  void backward_input(float* slot, const ExpertGroups& g, const float* dy, float* dx) override;
  void backward_weight(float* slot, const ExpertGroups& g) override;

 private:
  // Offsets in a slot, R = shape.max_rows: (R,C) (R,2H) (R,H) (R,C) (R,2H).
  struct {
    size_t x_rows, gu, h, dy_rows, d_gu;
  } off_{};
  Arena dh_;  // (R, H): the SwiGLU output's gradient during backward_input only
};

}  // namespace mt
