// --precision bf16's attention core for one (batch, head) (docs/precision.md): the six
// products of attention_avx512.h with bf16 operands (q, k, v, dout, the probabilities and
// their gradient, rounded to nearest even by the CPU's conversion instructions) and fp32
// accumulation through AVX512-BF16 dot products; the scores, softmax and its backward stay
// fp32. The caller uses the fp32 kernels where attention_bf16_avx512_supports is false.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention_avx512.h"
#include "kernels/bf16.h"

namespace mt {

// True when this build and this CPU run these kernels for this head dim (16, 32, 64 or 128).
bool attention_bf16_avx512_supports(int hd);
// Bytes of the per-thread buffers the kernels keep for heads of length T and head dim hd
// (what they grow to; they are never freed). Like the words below, the kernels' size on any
// CPU (a local plan counts its profile's CPU: model/kernel_target.h), 0 for a head dim they
// do not take or in a build without AVX-512.
size_t attention_bf16_avx512_scratch_bytes(int T, int hd);

// 32-bit words of one head's saved packing (AttentionSaved::row_stats_packed): q as rows of
// pairs (T, hd / 2), then k as key blocks (T rounded up to 32, hd / 2).
size_t attention_bf16_avx512_packed_words(int T, int hd);

// As attention_head_forward_avx512 / attention_head_backward_avx512, with bf16 products.
// stats not null (T, 2): the forward keeps each row's maximum score and 1 / sum there instead
// of writing att (which may then be null), and the backward recomputes P from them, bit for
// bit the forward's (attention.h, AttentionSaved::row_stats). packed not null (with stats,
// attention_bf16_avx512_packed_words of them): the forward packs q and k there instead of
// into its per-thread buffers, and the backward's recomputation of the scores reads them
// from there instead of packing q and k again (row_stats_packed).
void attention_head_forward_bf16(const AttentionHead& h, float* out, int ldo, float* att,
                                 float* stats = nullptr, uint32_t* packed = nullptr);
// With bf16 outputs (rounded as to_bf16 rounds): out, and dq, dk, dv overwritten; the
// backward needs T <= kAttentionBf16DirectMaxT (one pass of query rows, so each gradient row
// is written once).
constexpr int kAttentionBf16DirectMaxT = 128;
void attention_head_forward_bf16(const AttentionHead& h, bf16* out, int ldo, float* att,
                                 float* stats = nullptr, uint32_t* packed = nullptr);
void attention_head_backward_bf16(const AttentionHead& h, bf16* dq, bf16* dk, bf16* dv, int ldd,
                                  const float* dout, int lddo, const float* att,
                                  const float* stats = nullptr, const uint32_t* packed = nullptr);

// accumulate false overwrites dq, dk, dv instead of adding to them. No scratch from the
// caller: the kernel keeps each head's dP / dS in a per-thread (T, T) buffer that stays in L2
// (attention_bf16_avx512_scratch_bytes).
void attention_head_backward_bf16(const AttentionHead& h, float* dq, float* dk, float* dv, int ldd,
                                  const float* dout, int lddo, const float* att, bool accumulate,
                                  const float* stats = nullptr, const uint32_t* packed = nullptr);

}  // namespace mt
