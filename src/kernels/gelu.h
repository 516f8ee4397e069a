// tanh-approximated GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include <cstddef>

#include "kernels/bf16.h"

namespace mt {

// out (n) = gelu(inp (n)). out may alias inp only if the caller keeps no need for inp.
void gelu_forward(float* out, const float* inp, size_t n);

// dinp (n) += gelu'(inp) * dout.  dinp may alias dout (then it is overwritten, not accumulated).
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

// Fused: pre (N, OC) += bias (OC) broadcast over rows, then out = gelu(pre). Keeps pre for
// backward.
void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int OC);

// --precision bf16: the same results rounded to bf16 as they are stored (bitwise
// to_bf16(bias_gelu_forward's out) and to_bf16(gelu_backward's overwritten dinp)), so the
// block writes its bf16 GEMM inputs without an fp32 round trip through memory.
void bias_gelu_forward_bf16(bf16* out, float* pre, const float* bias, int N, int OC);
void gelu_backward_bf16(bf16* dinp, const float* inp, const float* dout, size_t n);
// out (n) = bf16(gelu(pre (n))), pre read only: for a GEMM that added the bias itself (a
// oneDNN primitive's epilogue, dense_gemm_bf16.h), so pre is not written back. Bitwise
// bias_gelu_forward_bf16's out when pre already holds the sum.
void gelu_forward_bf16(bf16* out, const float* pre, size_t n);

// One row of each (n values), for a GEMM that applies them in its store (dense_gemm_bf16):
// out = bf16(gelu(pre)) with the bias already in pre, and dinp = bf16(gelu'(pre) * dout),
// the values of bias_gelu_forward_bf16 and gelu_backward_bf16 bit for bit. Not profiled:
// their time is the calling GEMM's.
void gelu_forward_bf16_row(bf16* out, const float* pre, int n);
void gelu_backward_bf16_row(bf16* dinp, const float* pre, const float* dout, int n);

}  // namespace mt
