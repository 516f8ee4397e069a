// Naive twin of kernels/flash_attention.h (namespace mt::ref, same signatures, the scratch
// ignored): one query row at a time in double, straight from the formulas — q and k rotated
// to their positions, s = q.k / sqrt(hd) over the keys with kpos <= qpos, the softmax, the
// log-sum-exp merge; the backward from the given lse and D: P = exp(s - lse),
// dS = P (dP - D) / sqrt(hd). Query head j reads kv head j / (H / Hkv). --dropout: the P
// that multiplies V is P m / (1 - p), m from dropout_keeps element by element; the backward
// dS = P (m dP / (1 - p) - D) / sqrt(hd), dV += P m / (1 - p) dout.
#pragma once

#include <cstddef>
#include <span>

#include "kernels/flash_attention.h"

namespace mt::ref {

void flash_attention_forward(float* out, size_t ldo, float* lse, const FlashAttention& a,
                             bool accumulate, std::span<float> scratch);
void flash_attention_backward_prep(float* D, const float* out, size_t ldo, const float* dout,
                                   size_t lddo, int B, int Tq, int H, int hd);
void flash_attention_backward(const FlashGrads& g, const float* dout, size_t lddo, const float* lse,
                              const float* D, const FlashAttention& a, std::span<float> scratch);

}  // namespace mt::ref
