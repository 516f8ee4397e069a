// SwiGLU's elementwise core (Llama's MLP, docs/contracts.md section 9):
//   out = silu(gate) * up,  silu(g) = g * sigmoid(g),
// where each row of gu holds [gate (F) | up (F)]: the output of one fused GEMM by
// [gate_proj; up_proj]. down_proj follows.
#pragma once

#include <cstddef>

#include "kernels/bf16.h"

namespace mt {

// out (N, F) = silu(gu[:, :F]) * gu[:, F:], gu (N, 2F).
void swiglu_forward(float* out, const float* gu, int N, int F);

// dgu (N, 2F): [dout * up * silu'(gate) | dout * silu(gate)], added (accumulate) or
// overwriting (the block's use: no memset first).
void swiglu_backward(float* dgu, const float* gu, const float* dout, int N, int F,
                     bool accumulate = true);

// --precision bf16: the same results rounded to bf16 as they are stored (bitwise to_bf16 of
// swiglu_forward's out and of swiglu_backward's overwritten dgu), so a block writes its bf16
// GEMM operands without an fp32 round trip through memory.
void swiglu_forward_bf16(bf16* out, const float* gu, int N, int F);
void swiglu_backward_bf16(bf16* dgu, const float* gu, const float* dout, int N, int F);

// One row of each bf16 function above on F units whose gate and up (and their gradients)
// lie apart: the functions above run these per row, so the grouped GEMMs that apply SwiGLU
// to a block of columns as they store it (grouped_gemm.h, *_swiglu) give the same bits.
//   out[i] = silu(gate[i]) * up[i];  dgate[i], dup[i] from dout[i] as swiglu_backward.
void swiglu_forward_bf16_row(bf16* out, const float* gate, const float* up, int F);
void swiglu_backward_bf16_row(bf16* dgate, bf16* dup, const float* gate, const float* up,
                              const float* dout, int F);

}  // namespace mt
