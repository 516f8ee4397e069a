// SwiGLU's elementwise core (Llama's MLP, docs/contracts.md section 9):
//   out = silu(gate) * up,  silu(g) = g * sigmoid(g),
// where gate = h Wgate^T and up = h Wup^T come from two GEMMs; down_proj follows.
#pragma once

#include <cstddef>

#include "kernels/bf16.h"

namespace mt {

// out (n) = silu(gate (n)) * up (n).
void swiglu_forward(float* out, const float* gate, const float* up, size_t n);

// dgate (n) += dout * up * silu'(gate);  dup (n) += dout * silu(gate).
// dgate may alias dout (then it is overwritten, not accumulated; dup must not alias).
void swiglu_backward(float* dgate, float* dup, const float* gate, const float* up,
                     const float* dout, size_t n);

// --precision bf16: the same results rounded to bf16 as they are stored (bitwise to_bf16 of
// swiglu_forward's out, and of swiglu_backward's overwritten dgate and dup), so a block writes
// its bf16 GEMM operands without an fp32 round trip through memory.
void swiglu_forward_bf16(bf16* out, const float* gate, const float* up, size_t n);
void swiglu_backward_bf16(bf16* dgate, bf16* dup, const float* gate, const float* up,
                          const float* dout, size_t n);

}  // namespace mt
