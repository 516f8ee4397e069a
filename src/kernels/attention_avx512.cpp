// Register-blocked AVX-512 causal attention for one (batch, head) in fp32 (declared in
// attention_avx512.h; the bf16 products are attention_bf16_avx512.cpp).
#include "kernels/attention_avx512.h"

#if defined(__AVX512F__)
#include <algorithm>
#include <vector>

#include "kernels/attention_avx512_tiles.h"
#endif

namespace mt {

#if defined(__AVX512F__)
// Why not dnnl_sgemm per (batch, head): at T = 128 and hd = 32..64 each product is only a
// few hundred thousand FLOPs, the per-call cost is a large share of that, and splitting a
// call for causal skipping made it slower; that path ran at 27-50 % of the sgemm peak
// (config a, bench_step), these kernels at 80-100 % (counting full T x T FLOPs).
//
// Two register-blocked micro-kernels do all six products of forward and backward:
//  - scores_tile: S[r][0:32] = alpha * x[r] . y[j0 + 0:32] for 8 query rows against a block
//    of 32 keys transposed into yt (hd, 32), so every step is one broadcast of x[r][d] times
//    two vectors of yt[d] (16 accumulators). Only blocks on or below the diagonal run.
//  - rows_tile: c[r][0:hd] (+)= sum_k a(r, k) b[k][0:hd], with a addressed by strides so the
//    same code multiplies by P (dq, out) and by P^T (dk, dv); k stops at the diagonal.
// Causal skipping comes from the loop bounds: the (T, T) work is about halved.
namespace {

using namespace attention_avx512;

// yt (HD, 32) = rows y[0 .. n-1] (row stride ldy) transposed; columns n..31 are zero.
template <int HD>
void transpose_block(float* yt, const float* y, int ldy, int n) {
  for (int half = 0; half < 2; half++) {
    for (int d0 = 0; d0 < HD; d0 += 16) {
      __m512 r[16];
      for (int j = 0; j < 16; j++) {
        const int row = half * 16 + j;
        r[j] = row < n ? _mm512_loadu_ps(y + size_t(row) * ldy + d0) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int c = 0; c < 16; c++) _mm512_store_ps(yt + (d0 + c) * kKeyBlock + half * 16, r[c]);
    }
  }
}

template <int HD, int R>
void scores_tile(float* s, int lds, const float* x, int ldx, const float* yt, float alpha,
                 __mmask16 m0, __mmask16 m1) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
  for (int d = 0; d < HD; d++) {
    const __m512 y0 = _mm512_load_ps(yt + d * kKeyBlock);
    const __m512 y1 = _mm512_load_ps(yt + d * kKeyBlock + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const __m512 xb = _mm512_set1_ps(x[size_t(r) * ldx + d]);
      acc0[r] = _mm512_fmadd_ps(xb, y0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(xb, y1, acc1[r]);
    }
  }
  store_scores<R>(s, lds, acc0, acc1, alpha, m0, m1);
}

// scores_tile for the last rows < kScoreRows rows.
template <int HD, int R>
void scores_tail(int rows, float* s, int lds, const float* x, int ldx, const float* yt, float alpha,
                 __mmask16 m0, __mmask16 m1) {
  if constexpr (R > 0) {
    if (rows == R)
      scores_tile<HD, R>(s, lds, x, ldx, yt, alpha, m0, m1);
    else
      scores_tail<HD, R - 1>(rows, s, lds, x, ldx, yt, alpha, m0, m1);
  }
}

// s (T, T), row stride T, on and below the diagonal = alpha * x y^T; x, y are (T, HD).
// Entries above the diagonal inside a diagonal block are written too (the callers overwrite
// them); blocks entirely above the diagonal are left untouched.
template <int HD>
void causal_scores(float* s, const float* x, int ldx, const float* y, int ldy, int T, float alpha) {
  alignas(64) float yt[HD * kKeyBlock];
  for (int j0 = 0; j0 < T; j0 += kKeyBlock) {
    const int n = std::min(kKeyBlock, T - j0);
    transpose_block<HD>(yt, y + size_t(j0) * ldy, ldy, n);
    const __mmask16 m0 = tail_mask(n), m1 = tail_mask(n - 16);
    int i0 = j0;  // query rows before j0 see none of these keys
    for (; i0 + kScoreRows <= T; i0 += kScoreRows)
      scores_tile<HD, kScoreRows>(s + size_t(i0) * T + j0, T, x + size_t(i0) * ldx, ldx, yt, alpha,
                                  m0, m1);
    if (i0 < T)
      scores_tail<HD, kScoreRows - 1>(T - i0, s + size_t(i0) * T + j0, T, x + size_t(i0) * ldx, ldx,
                                      yt, alpha, m0, m1);
  }
}

template <int HD, int R>
void rows_tile(float* c, int ldc, bool accumulate, const float* a, int ars, int aks, const float* b,
               int ldb, int k0, int k1) {
  constexpr int NV = HD / 16;
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
  for (int k = k0; k < k1; k++) {
    __m512 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(b + size_t(k) * ldb + 16 * v);
    const float* ak = a + size_t(k) * aks;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const __m512 ab = _mm512_set1_ps(ak[size_t(r) * ars]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(ab, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) {
      float* cp = c + size_t(r) * ldc + 16 * v;
      _mm512_storeu_ps(cp, accumulate ? _mm512_add_ps(_mm512_loadu_ps(cp), acc[r][v]) : acc[r][v]);
    }
  }
}

// rows_tile for any row count 1..R.
template <int HD, int R>
void rows_any(int rows, float* c, int ldc, bool accumulate, const float* a, int ars, int aks,
              const float* b, int ldb, int k0, int k1) {
  if constexpr (R > 0) {
    if (rows == R)
      rows_tile<HD, R>(c, ldc, accumulate, a, ars, aks, b, ldb, k0, k1);
    else
      rows_any<HD, R - 1>(rows, c, ldc, accumulate, a, ars, aks, b, ldb, k0, k1);
  }
}

// One head's (T, T) scores and probabilities, per thread (grown to the largest head seen, never
// freed), where the caller keeps row statistics instead of P: written and re-read within the
// head, so they stay in L2 instead of streaming (B, H, T, T) floats through memory.
float* thread_head_probs(int T) {
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(T) * T) buf.resize(size_t(T) * T);
  return buf.data();
}

// stats not null: P goes to thread_head_probs and each row's maximum and 1 / sum to stats.
template <int HD>
void forward_head(const AttentionHead& h, float* out, int ldo, float* att, float* stats) {
  const int T = h.T;
  if (stats) att = thread_head_probs(T);
  causal_scores<HD>(att, h.q, h.ld, h.k, h.ld, T, h.scale);
  // Softmax a tile of rows while they are in L1, then out[i0:i1] = P[i0:i1, 0:i1] v[0:i1].
  constexpr int R = rows_per_tile<HD>();
  for (int i0 = 0; i0 < T; i0 += R) {
    const int rows = std::min(R, T - i0);
    for (int i = i0; i < i0 + rows; i++)
      softmax_causal_row(att + size_t(i) * T, i, T, stats ? stats + 2 * i : nullptr);
    rows_any<HD, R>(rows, out + size_t(i0) * ldo, ldo, false, att + size_t(i0) * T, T, 1, h.v, h.ld,
                    0, i0 + rows);
  }
}

// P again from the forward's row statistics into thread_head_probs: the forward's scores
// (the same products on the same inputs), then softmax_recompute_row, bit for bit its P with
// its zeros above the diagonal (the key-side products read them).
template <int HD>
const float* recompute_probs(const AttentionHead& h, const float* stats) {
  const int T = h.T;
  float* p = thread_head_probs(T);
  causal_scores<HD>(p, h.q, h.ld, h.k, h.ld, T, h.scale);
  for (int i = 0; i < T; i++) softmax_recompute_row<true>(p + size_t(i) * T, i, T, stats + 2 * i);
  return p;
}

// accumulate false: each element's first contribution is stored as it is (rows_tile's zeroed
// accumulator plus FMAs is never -0, so it equals 0 + it): dq's single product, and dk / dv's
// product over the query block holding their first row; later query blocks add.
template <int HD>
void backward_head(const AttentionHead& h, float* dq, float* dk, float* dv, int ldd,
                   const float* dout, int lddo, const float* att, const float* stats, float* da,
                   bool accumulate) {
  const int T = h.T;
  constexpr int R = rows_per_tile<HD>();
  if (stats) att = recompute_probs<HD>(h, stats);
  // dP = dout v^T on and below the diagonal.
  causal_scores<HD>(da, dout, lddo, h.v, h.ld, T, 1.0f);
  // dS (softmax backward, in place), then dq[i0:i1] += dS[i0:i1, 0:i1] k[0:i1].
  for (int i0 = 0; i0 < T; i0 += R) {
    const int rows = std::min(R, T - i0);
    for (int i = i0; i < i0 + rows; i++)
      softmax_backward_row(da + size_t(i) * T, att + size_t(i) * T, i, T, h.scale);
    rows_any<HD, R>(rows, dq + size_t(i0) * ldd, ldd, accumulate, da + size_t(i0) * T, T, 1, h.k,
                    h.ld, 0, i0 + rows);
  }
  // Key / value rows j0.. receive from query rows i >= j0: dk += dS^T q, dv += P^T dout.
  // A key tile reads a narrow column strip of dS and P down all its query rows; taking the
  // query rows kQueryBlock at a time keeps those rows in L2 across the key tiles at long T
  // (at T = 1024 the unblocked loop ran 10 % slower than the sgemm path).
  for (int r0 = 0; r0 < T; r0 += kQueryBlock) {
    const int r1 = std::min(T, r0 + kQueryBlock);
    for (int j0 = 0; j0 < r1; j0 += R) {
      const int rows = std::min(R, T - j0), k0 = std::max(j0, r0);
      const bool add = accumulate || j0 < r0;  // j0 >= r0: the first block reaching row j0
      rows_any<HD, R>(rows, dk + size_t(j0) * ldd, ldd, add, da + j0, 1, T, h.q, h.ld, k0, r1);
      rows_any<HD, R>(rows, dv + size_t(j0) * ldd, ldd, add, att + j0, 1, T, dout, lddo, k0, r1);
    }
  }
}

}  // namespace

bool attention_avx512_supports(int hd) {
  return KernelHeadDims::supports(hd);
}

void attention_head_forward_avx512(const AttentionHead& h, float* out, int ldo, float* att,
                                   float* stats) {
  with_head_dim(h.hd, "attention_head_forward_avx512",
                [&](auto hd) { forward_head<decltype(hd)::value>(h, out, ldo, att, stats); });
}

void attention_head_backward_avx512(const AttentionHead& h, float* dq, float* dk, float* dv,
                                    int ldd, const float* dout, int lddo, const float* att,
                                    float* datt, const float* stats, bool accumulate) {
  with_head_dim(h.hd, "attention_head_backward_avx512", [&](auto hd) {
    backward_head<decltype(hd)::value>(h, dq, dk, dv, ldd, dout, lddo, att, stats, datt,
                                       accumulate);
  });
}

#else  // no AVX-512: attention.cpp uses its sgemm path for every head dim

bool attention_avx512_supports(int) {
  return false;
}
void attention_head_forward_avx512(const AttentionHead&, float*, int, float*, float*) {}
void attention_head_backward_avx512(const AttentionHead&, float*, float*, float*, int, const float*,
                                    int, const float*, float*, const float*, bool) {}

#endif

}  // namespace mt
