// --precision bf16's attention core on AMX machines (picked at run time by attention.cpp,
// attention_bf16_path): per sequence, the five products of the GPT attention core as oneDNN
// matmuls batched over the NH heads (AMX tiles, "brg:avx512_core_amx_bf16"), the softmax and
// its backward in fp32 between them with AVX-512 exp. Same contract and the same roundings as
// the register-tiled AVX512-BF16 kernels (attention_bf16_avx512.h): q, k, v, dout and the
// probabilities P and their gradient dS rounded to nearest even, fp32 accumulation, fp32
// scores and softmax; only the summation order differs. Why a second kernel: on the AMX
// machine (Xeon, 2026-12-06) a vdpbf16ps retired at a quarter of an FMA's instruction rate
// (16 independent chains: 0.4 against 1.7 G instructions/s), half its FLOP rate, so the
// AVX512-BF16 kernel ran the bf16 core slower than the fp32 one; AMX tiles run the products
// far faster. For head dims 64 and 128 (attention_bf16_batched_supports says why not 32).
//
// Unit of work: one sequence b (all its heads), so every product has the same shape
// whatever the thread count (results do not depend on the team) and its (NH, T, T) blocks
// stay in cache between the products. Sequences are split over OpenMP; oneDNN runs each
// product single-threaded inside.
#pragma once

#include "kernels/bf16.h"

namespace mt {

// True when this build and CPU run these kernels for head dim hd (64 or 128 on an AVX-512
// build whose bf16 GEMMs run on AMX).
bool attention_bf16_batched_supports(int hd);

// out (B, T, C) = the attention output (float, or rounded to bf16 as to_bf16 rounds);
// att (B, NH, T, T) = the probabilities, exact zeros above the diagonal.
void attention_forward_bf16_batched(float* out, float* att, const float* qkv, int B, int T, int C,
                                    int NH);
void attention_forward_bf16_batched(bf16* out, float* att, const float* qkv, int B, int T, int C,
                                    int NH);

// dqkv (B, T, 3C) (+)= the gradient from dout (B, T, C) (float: added with accumulate, else
// overwritten; bf16: overwritten). scratch holds B * NH * T * T floats.
void attention_backward_bf16_batched(float* dqkv, float* scratch, const float* dout,
                                     const float* qkv, const float* att, int B, int T, int C,
                                     int NH, bool accumulate);
void attention_backward_bf16_batched(bf16* dqkv, float* scratch, const float* dout,
                                     const float* qkv, const float* att, int B, int T, int C,
                                     int NH);

}  // namespace mt
