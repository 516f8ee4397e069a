// Register-blocked AVX-512 causal attention for one (batch, head), used by attention.cpp
// for the common head dims. The caller parallelises over (batch, head) and falls back to
// its sgemm path when these return false (other head dims, or a build without AVX-512).
#pragma once

#include "kernels/bf16.h"

namespace mt {

// One head's slices of the qkv activation: q, k, v are (T, hd) with row stride ld.
struct AttentionHead {
  const float* q;
  const float* k;
  const float* v;
  int ld;
  int T, hd;
  float scale;  // 1 / sqrt(hd)
};

// True when attention_head_*_avx512 handle this head dim in this build.
bool attention_avx512_supports(int hd);

// out (T, hd), row stride ldo = softmax_causal(scale q k^T) v; att (T, T) receives the
// probabilities with exact zeros above the diagonal.
void attention_head_forward_avx512(const AttentionHead& h, float* out, int ldo, float* att);

// dq, dk, dv (T, hd), row stride ldd, += the gradients from dout (T, hd), row stride lddo.
// datt is (T, T) scratch.
void attention_head_backward_avx512(const AttentionHead& h, float* dq, float* dk, float* dv,
                                    int ldd, const float* dout, int lddo, const float* att,
                                    float* datt);

// --precision bf16's attention core (docs/precision.md): the same six products with bf16
// operands (q, k, v, dout, the probabilities and their gradient, rounded to nearest even by
// the CPU's conversion instructions) and fp32 accumulation through AVX512-BF16 dot products;
// the scores, softmax and its backward stay fp32. True when this build and this CPU run them
// for this head dim (16, 32, 64 or 128); otherwise the caller uses the fp32
// kernels above.
bool attention_bf16_avx512_supports(int hd);

// As attention_head_forward_avx512 / attention_head_backward_avx512, with bf16 products.
void attention_head_forward_bf16(const AttentionHead& h, float* out, int ldo, float* att);
// With bf16 outputs (rounded as to_bf16 rounds): out, and dq, dk, dv overwritten; the
// backward needs T <= kAttentionBf16DirectMaxT (one pass of query rows, so each gradient row
// is written once).
constexpr int kAttentionBf16DirectMaxT = 128;
void attention_head_forward_bf16(const AttentionHead& h, bf16* out, int ldo, float* att);
void attention_head_backward_bf16(const AttentionHead& h, bf16* dq, bf16* dk, bf16* dv, int ldd,
                                  const float* dout, int lddo, const float* att, float* datt);

// accumulate false overwrites dq, dk, dv instead of adding to them.
void attention_head_backward_bf16(const AttentionHead& h, float* dq, float* dk, float* dv, int ldd,
                                  const float* dout, int lddo, const float* att, float* datt,
                                  bool accumulate);

}  // namespace mt
