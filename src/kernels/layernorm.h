// LayerNorm over the last dim (biased variance, eps 1e-5), forward / backward pair.
// Backward accumulates (+=); the weight half is separately callable (deferred W).
#pragma once

#include <cstddef>

#include "kernels/bf16.h"

namespace mt {

// out (N, C) = (inp - mean) * rstd * weight + bias; saves mean (N), rstd (N).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C);

// --precision bf16: out rounded to bf16 as it is stored, bitwise to_bf16 of
// layernorm_forward's out (the statistics are the same fp32 ones), so the block writes its
// bf16 GEMM input without an fp32 round trip through memory.
void layernorm_forward_bf16(bf16* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C);

// x (N, C) += res (N, C), the block's residual add, then out = layernorm(x) of the sum: one pass
// over the rows, bitwise add_inplace(x, res) followed by layernorm_forward (the re-read of the
// sum saved, and the add counted in the norm phase). The bf16 form rounds out as
// layernorm_forward_bf16 does.
void add_layernorm_forward(float* out, float* mean, float* rstd, float* x, const float* res,
                           const float* weight, const float* bias, int N, int C);
void add_layernorm_forward_bf16(bf16* out, float* mean, float* rstd, float* x, const float* res,
                                const float* weight, const float* bias, int N, int C);

// x (n) += res (n): a residual add with no norm behind it in the same block (the block's end),
// add_inplace profiled as part of the norm phase rather than left to the framework's time.
void residual_add(float* x, const float* res, size_t n);

// dinp (N, C) += d/dinp, from dout (N, C) and the saved statistics.
void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                              const float* mean, const float* rstd, int N, int C);

// dinp (N, C) = d/dinp (overwrites): bitwise a memset of dinp followed by
// layernorm_backward_input (each value is 0 + d/dinp), without the memset's pass.
void layernorm_backward_input_overwrite(float* dinp, const float* dout, const float* inp,
                                        const float* weight, const float* mean, const float* rstd,
                                        int N, int C);

// dinp (N, C) = dres (N, C) + d/dinp: the block's residual path and its norm's input gradient
// in one pass, bitwise a copy of dres into dinp followed by layernorm_backward_input (the
// copy's read and write of the (N, C) buffer saved). dinp may be dres.
void layernorm_backward_input_residual(float* dinp, const float* dres, const float* dout,
                                       const float* inp, const float* weight, const float* mean,
                                       const float* rstd, int N, int C);

// The same, and dinp16 (N, C) = the bf16 rounding of the new dinp, bitwise to_bf16(dinp16,
// dinp): the bf16 output gradient the layer before the norm's GEMMs read (the GPT block's
// attention projection), rounded in the row pass that forms it instead of a pass of its own.
void layernorm_backward_input_residual_bf16(float* dinp, bf16* dinp16, const float* dres,
                                            const float* dout, const float* inp,
                                            const float* weight, const float* mean,
                                            const float* rstd, int N, int C);

// dweight (C) += sum_n dout * xhat;  dbias (C) += sum_n dout.
void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int N, int C);

}  // namespace mt
