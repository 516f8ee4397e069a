// Naive twins of kernels/grouped_gemm.h (namespace mt::ref, same signatures): each group's
// product straight from its definition, one output element at a time, summed in double.
// The bf16 kernels are checked against these on their bf16 inputs widened to fp32 (exact).
#pragma once

#include <cstdint>

namespace mt::ref {

void grouped_matmul_forward(float* out, const float* inp, const float* const* weight,
                            const int32_t* offset, int groups, int C, int OC);
void grouped_matmul_backward_input(float* dinp, const float* dout, const float* const* weight,
                                   const int32_t* offset, int groups, int C, int OC,
                                   bool accumulate = true);
void grouped_matmul_backward_weight(float* const* dweight, const float* dout, const float* inp,
                                    const int32_t* offset, int groups, int C, int OC);

}  // namespace mt::ref
