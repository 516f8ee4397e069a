// What the fp32 (attention_avx512.cpp) and the bf16 (attention_bf16_avx512.cpp) causal
// attention kernels share: the tile sizes, the 16x16 transpose, the store of a score tile,
// the causal softmax rows in both directions (and their row dot product, masked_dot16, which
// the AMX kernel's fused rows share), and the one head-dim dispatcher that turns a
// runtime head dim into the template argument every kernel is instantiated for.
//
// A kernel for one (batch, head) reads its q, k, v rows through AttentionHead's pointers
// only, so the caller decides which K/V rows a query head reads (grouped-query attention
// points several query heads at one kv head's rows).
//
// Included by the attention kernels' sources and the AMX kernel's headers, only in AVX-512
// builds.
#pragma once

#if defined(__AVX512F__)
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "kernels/vec_math.h"  // exp_vec512 and <immintrin.h>

namespace mt::attention_avx512 {

constexpr int kKeyBlock = 32;     // keys per transposed block: two vectors wide
constexpr int kScoreRows = 8;     // 8 rows x 2 vectors = 16 accumulators
constexpr int kQueryBlock = 128;  // query rows per pass of the dk / dv products

// The head dims the kernels are compiled for. supports() and with_head_dim() read the same
// list, so a head dim is either dispatched or reported unsupported, never half of each.
template <int... HDs>
struct HeadDimList {
  static constexpr bool supports(int hd) { return ((hd == HDs) || ...); }
  // f(std::integral_constant<int, HD>{}) for the HD equal to hd; false when there is none.
  template <class F>
  static bool dispatch(int hd, F&& f) {
    return ((hd == HDs ? (f(std::integral_constant<int, HDs>{}), true) : false) || ...);
  }
};
using KernelHeadDims = HeadDimList<16, 32, 64, 128>;

// f(std::integral_constant<int, hd>{}); `kernel` names the caller when hd is not compiled.
template <class F>
void with_head_dim(int hd, const char* kernel, F&& f) {
  const bool dispatched = KernelHeadDims::dispatch(hd, f);
  MT_CHECK(dispatched, kernel, ": unsupported head dim ", hd);
}

inline __mmask16 tail_mask(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// The rows products' row count per head dim: R rows x hd/16 vectors stay within ~24
// accumulators.
template <int HD>
constexpr int rows_per_tile() {
  return HD <= 32 ? 8 : HD == 64 ? 6 : 3;
}

// In-register transpose of the 16x16 block r[0..15] (rows) into columns.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] =
        _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(
        _mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(
        _mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // r[4g + c] now holds, in 128-bit lane L, column 4L + c of rows 4g .. 4g+3; the two lane
  // shuffles below gather each column's four lanes into one register.
  for (int i = 0; i < 16; i += 8) {
    for (int c = 0; c < 4; c++) {
      t[i + c] = _mm512_shuffle_f32x4(r[i + c], r[i + 4 + c], 0x88);
      t[i + 4 + c] = _mm512_shuffle_f32x4(r[i + c], r[i + 4 + c], 0xdd);
    }
  }
  for (int c = 0; c < 8; c++) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
  }
}

// R rows of a 32-key score tile, acc times alpha, into s (row stride lds); m0, m1 mask the
// two 16-key halves. Always inlined so the accumulators stay in registers.
template <int R>
[[gnu::always_inline]] inline void store_scores(float* s, int lds, const __m512* acc0,
                                                const __m512* acc1, float alpha, __mmask16 m0,
                                                __mmask16 m1) {
  const __m512 va = _mm512_set1_ps(alpha);
  if ((m0 & m1) == 0xFFFF) {  // full block: plain stores (masked stores are slow on Zen 4)
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      _mm512_storeu_ps(s + size_t(r) * lds, _mm512_mul_ps(acc0[r], va));
      _mm512_storeu_ps(s + size_t(r) * lds + 16, _mm512_mul_ps(acc1[r], va));
    }
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
    _mm512_mask_storeu_ps(s + size_t(r) * lds, m0, _mm512_mul_ps(acc0[r], va));
    _mm512_mask_storeu_ps(s + size_t(r) * lds + 16, m1, _mm512_mul_ps(acc1[r], va));
  }
}

// row[0..i] = softmax(row[0..i]); row[i+1 .. T-1] = 0. stat, when not null, receives the
// row's maximum and 1 / sum (stat[0], stat[1]), from which softmax_recompute_row gives this row
// again.
inline void softmax_causal_row(float* row, int i, int T, float* stat = nullptr) {
  const int n = i + 1, nfull = n & ~15;
  const __mmask16 mt = tail_mask(n - nfull);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int j = 0; j < nfull; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(row + j));
  vmax = _mm512_mask_max_ps(vmax, mt, vmax, _mm512_maskz_loadu_ps(mt, row + nfull));
  const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (int j = 0; j < nfull; j += 16) {
    const __m512 e = exp_vec512(_mm512_sub_ps(_mm512_loadu_ps(row + j), vm));
    _mm512_storeu_ps(row + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  const __m512 et = exp_vec512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mt, row + nfull), vm));
  vsum = _mm512_mask_add_ps(vsum, mt, vsum, et);
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  if (stat) stat[0] = _mm512_cvtss_f32(vm), stat[1] = _mm512_cvtss_f32(inv);
  for (int j = 0; j < nfull; j += 16)
    _mm512_storeu_ps(row + j, _mm512_mul_ps(_mm512_loadu_ps(row + j), inv));
  _mm512_mask_storeu_ps(row + nfull, mt, _mm512_mul_ps(et, inv));
  std::memset(row + n, 0, sizeof(float) * size_t(T - n));
}

// row[0..i], the scores softmax_causal_row (or the bf16 kernel's stripe) turned into
// probabilities and kept stat (the maximum, 1 / sum) for, become those probabilities again:
// exp(s - max) times 1 / sum, the forward's instructions on the forward's values, so bit for
// bit its P. kZeroTail: row[i+1 .. T-1] = 0 as the forward left it (the fp32 kernel's key-side
// products read there); false leaves them (the bf16 backward reads only up to i).
template <bool kZeroTail>
inline void softmax_recompute_row(float* row, int i, int T, const float* stat) {
  const int n = i + 1, nfull = n & ~15;
  const __mmask16 mt = tail_mask(n - nfull);
  const __m512 vm = _mm512_set1_ps(stat[0]), inv = _mm512_set1_ps(stat[1]);
  for (int j = 0; j < nfull; j += 16)
    _mm512_storeu_ps(row + j,
                     _mm512_mul_ps(exp_vec512(_mm512_sub_ps(_mm512_loadu_ps(row + j), vm)), inv));
  const __m512 et = exp_vec512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mt, row + nfull), vm));
  _mm512_mask_storeu_ps(row + nfull, mt, _mm512_mul_ps(et, inv));
  if constexpr (kZeroTail) std::memset(row + n, 0, sizeof(float) * size_t(T - n));
}

// sum_j p[j] d[j] over j < n, broadcast to all lanes: 16 lanes of fused multiply-adds, the
// tail masked, one reduction. The softmax backward's row dot product, shared by this row and
// the AMX kernel's fused rows (attention_amx_softmax.h), which must keep its bits.
inline __m512 masked_dot16(const float* p, const float* d, int n) {
  const int nfull = n & ~15;
  const __mmask16 mt = tail_mask(n - nfull);
  __m512 vdot = _mm512_setzero_ps();
  for (int j = 0; j < nfull; j += 16)
    vdot = _mm512_fmadd_ps(_mm512_loadu_ps(p + j), _mm512_loadu_ps(d + j), vdot);
  vdot = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mt, p + nfull), _mm512_maskz_loadu_ps(mt, d + nfull),
                         vdot);
  return _mm512_set1_ps(_mm512_reduce_add_ps(vdot));
}

// Softmax backward of row i with the forward's scale folded in:
// d[j] = scale * p[j] * (d[j] - sum_k p[k] d[k]) for j <= i; d[i+1 .. T-1] = 0.
// kZeroTail false leaves d[i+1 ..] as it was (the bf16 backward reads only up to i).
template <bool kZeroTail = true>
void softmax_backward_row(float* d, const float* p, int i, int T, float scale) {
  const int n = i + 1, nfull = n & ~15;
  const __mmask16 mt = tail_mask(n - nfull);
  const __m512 dot = masked_dot16(p, d, n);
  const __m512 vs = _mm512_set1_ps(scale);
  for (int j = 0; j < nfull; j += 16) {
    const __m512 sp = _mm512_mul_ps(vs, _mm512_loadu_ps(p + j));
    _mm512_storeu_ps(d + j, _mm512_mul_ps(sp, _mm512_sub_ps(_mm512_loadu_ps(d + j), dot)));
  }
  const __m512 sp = _mm512_mul_ps(vs, _mm512_maskz_loadu_ps(mt, p + nfull));
  _mm512_mask_storeu_ps(
      d + nfull, mt, _mm512_mul_ps(sp, _mm512_sub_ps(_mm512_maskz_loadu_ps(mt, d + nfull), dot)));
  if constexpr (kZeroTail) std::memset(d + n, 0, sizeof(float) * size_t(T - n));
}

}  // namespace mt::attention_avx512

#endif  // __AVX512F__
