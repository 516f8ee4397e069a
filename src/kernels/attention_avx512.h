// Register-blocked AVX-512 causal attention for one (batch, head), used by attention.cpp
// for the common head dims. The caller parallelises over (batch, head) and falls back to
// its sgemm path when these return false (other head dims, or a build without AVX-512).
// The bf16 products of --precision bf16 are attention_bf16_avx512.h.
#pragma once

namespace mt {

// One head's slices of the qkv activation: q, k, v are (T, hd) with row stride ld. The
// kernels read K and V only through k and v, so which kv head a query head reads is the
// caller's choice.
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
// probabilities with exact zeros above the diagonal. stats not null (T, 2): att is not written
// (may be null); each row's maximum score and 1 / sum go there instead, from which the
// backward recomputes P bit for bit (attention.h, AttentionSaved::row_stats).
void attention_head_forward_avx512(const AttentionHead& h, float* out, int ldo, float* att,
                                   float* stats = nullptr);

// dq, dk, dv (T, hd), row stride ldd, += the gradients from dout (T, hd), row stride lddo.
// datt is (T, T) scratch. stats not null: P is recomputed from them (att unread).
// accumulate false: overwritten, bitwise the sum onto zeros (each element's first
// contribution is stored, not added to what is there).
void attention_head_backward_avx512(const AttentionHead& h, float* dq, float* dk, float* dv,
                                    int ldd, const float* dout, int lddo, const float* att,
                                    float* datt, const float* stats = nullptr,
                                    bool accumulate = true);

}  // namespace mt
