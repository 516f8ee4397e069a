// The GELU experts in fp32 (expert_mlp.h): per local expert one GEMM pair over its
// contiguous rows, the dense MLP's kernels; every buffer the backward reads stays fp32 in
// the slot.
#pragma once

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

}  // namespace mt
