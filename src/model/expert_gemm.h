// The local experts' GEMMs over an expert-major block of rows (expert le owns rows
// [g.begin(le), g.begin(le) + g.rows(le))), in fp32: today one GEMM per expert with rows.
// This is the seam a grouped GEMM kernel (one call over all local experts) replaces: the
// experts (expert_mlp_fp32.h) call only these three, and each expert's matrix is one Linear
// of the same (in, out) shape, so a kernel given the pointer lists and the row offsets has
// everything. The backward passes follow kernels/matmul.h's rules.
#pragma once

#include <vector>

#include "model/expert_mlp.h"
#include "model/linear.h"

namespace mt {

// y (g.total(), out) = x_e (rows, in) @ W_e^T (+ b_e when with_bias) for every expert.
void expert_gemm_forward(float* y, const float* x, const std::vector<Linear>& w,
                         const ExpertGroups& g, bool with_bias);
// dx (g.total(), in) += dy_e (rows, out) @ W_e for every expert.
void expert_gemm_backward_input(float* dx, const float* dy, const std::vector<Linear>& w,
                                const ExpertGroups& g);
// dW_e += dy_e^T @ x_e (and db_e += column sums of dy_e when with_bias) for every expert.
void expert_gemm_backward_weight(const std::vector<Linear>& w, const float* dy, const float* x,
                                 const ExpertGroups& g, bool with_bias);

}  // namespace mt
