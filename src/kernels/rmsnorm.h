// RMSNorm over the last dim (Llama, docs/contracts.md section 9), forward / backward pair:
//   y = x * rstd * weight,  rstd = 1 / sqrt(mean(x^2) + eps),
// statistics in fp32, in Hugging Face LlamaRMSNorm's order (x * rstd first, then * weight).
// Backward accumulates (+=); the weight half is separately callable (deferred W).
#pragma once

#include "kernels/bf16.h"

namespace mt {

// out (N, C) = rmsnorm(inp (N, C)); saves rstd (N).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps);

// --precision bf16: out rounded to bf16 as it is stored, bitwise to_bf16 of rmsnorm_forward's
// out (the same fp32 statistics), so a block writes its bf16 GEMM input in one pass.
void rmsnorm_forward_bf16(bf16* out, float* rstd, const float* inp, const float* weight, int N,
                          int C, float eps);

// x (N, C) += res (N, C), then out = rmsnorm(x): the block's residual add folded into its
// next norm's row pass, bitwise add_inplace followed by rmsnorm_forward(_bf16).
void add_rmsnorm_forward(float* out, float* rstd, float* x, const float* res, const float* weight,
                         int N, int C, float eps);
void add_rmsnorm_forward_bf16(bf16* out, float* rstd, float* x, const float* res,
                              const float* weight, int N, int C, float eps);

// dinp (N, C) += rstd * (g - xhat * mean(g * xhat)), g = dout * weight, xhat = inp * rstd.
void rmsnorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                            const float* rstd, int N, int C);

// dinp (N, C) = the input gradient (overwrites): bitwise a memset of dinp followed by
// rmsnorm_backward_input, without the memset's pass.
void rmsnorm_backward_input_overwrite(float* dinp, const float* dout, const float* inp,
                                      const float* weight, const float* rstd, int N, int C);

// dinp (N, C) = dres (N, C) + the input gradient: the residual path folded into the same pass,
// bitwise a copy of dres into dinp followed by rmsnorm_backward_input. dinp may be dres.
void rmsnorm_backward_input_residual(float* dinp, const float* dres, const float* dout,
                                     const float* inp, const float* weight, const float* rstd,
                                     int N, int C);

// dweight (C) += sum_n dout * xhat.
void rmsnorm_backward_weight(float* dweight, const float* dout, const float* inp, const float* rstd,
                             int N, int C);

}  // namespace mt
