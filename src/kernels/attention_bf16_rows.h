// The bf16 attention kernel's softmax rows, a stripe of query rows at a time, with their bf16
// copies written in the same pass (attention_bf16_avx512.cpp). A row's bf16 pairs, as the P v and
// dS k products broadcast them, are its bf16 values in order (pair kp = elements 2 kp, 2 kp + 1),
// so the pass that produces a value in a register can round and store it; no second pass re-reads
// the fp32 row to pack it. The fp32 arithmetic is softmax_causal_row's and softmax_backward_row's
// (attention_avx512_tiles.h), each row's instructions in their order, so the fp32 rows and their
// bf16 copies are bit for bit what the two passes gave.
//
// Included only by attention_bf16_avx512.cpp, in AVX-512 builds.
#pragma once

#if defined(__AVX512F__)
#include <cstdint>
#include <cstring>

#include "kernels/attention_avx512_tiles.h"

namespace mt::attention_avx512 {

#define MT_BF16_ROWS_TARGET __attribute__((target("avx512bf16")))

// 16 floats -> 16 bf16 at dst, rounded to nearest even (the rounding pairs32 packs with).
MT_BF16_ROWS_TARGET inline void store_bf16x16(uint16_t* dst, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)));
}

// p16[n .. cols) = 0 from the 16-aligned tail vector on (nfull = n rounded down to 16), once
// tail (the masked last vector, zeros past n) is stored at nfull.
MT_BF16_ROWS_TARGET inline void store_bf16_tail(uint16_t* p16, int nfull, __m512 tail, int cols) {
  if (nfull >= cols) return;
  store_bf16x16(p16 + nfull, tail);
  for (int j = nfull + 16; j < cols; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p16 + j), _mm256_setzero_si256());
}

// A stripe's rows are processed phase by phase, each phase over all the rows, because a row's
// reductions (its maximum, its sum, the backward's dot product: a chain of dependent vector
// operations, then a horizontal reduction) are too short at T 128 for the core to overlap one
// row's with the next row's work; side by side, the stripe's chains run in parallel. Every
// row keeps its own operations in their own order, so the bits do not change.

// Rows i0 .. i0 + rows - 1 (rows <= R) of a (T, T) block s: softmax_causal_row each (row i:
// s[i][0..i] = softmax, s[i][i+1 .. T-1] = 0) and p16 row r (row stride ld16) = row i0 + r in
// bf16 over [0, cols), zeros past i (cols a multiple of 16, at least i0 + rows). stats, when
// not null, receives row i's maximum and 1 / sum at stats[2 i], stats[2 i + 1]: what
// softmax_recompute_row needs to give the backward these probabilities again; the caller then
// reads only the bf16 rows, so s's rows are left as exp(s - max) (no fp32 P stored, no zeroed
// tail: two of the stripe's five passes over its rows).
template <int R>
MT_BF16_ROWS_TARGET void softmax_causal_stripe_bf16(float* s, int T, uint16_t* p16, int ld16,
                                                    int i0, int rows, int cols,
                                                    float* stats = nullptr) {
  __m512 vm[R], vsum[R], et[R];
  // Phase 1: the row maxima.
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
    if (r >= rows) break;
    const float* row = s + size_t(i0 + r) * T;
    const int n = i0 + r + 1, nfull = n & ~15;
    const __mmask16 mt = tail_mask(n - nfull);
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < nfull; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(row + j));
    vmax = _mm512_mask_max_ps(vmax, mt, vmax, _mm512_maskz_loadu_ps(mt, row + nfull));
    vm[r] = vmax;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
    if (r < rows) vm[r] = _mm512_set1_ps(_mm512_reduce_max_ps(vm[r]));
      // Phase 2: the exponentials and their sums.
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
    if (r >= rows) break;
    float* row = s + size_t(i0 + r) * T;
    const int n = i0 + r + 1, nfull = n & ~15;
    const __mmask16 mt = tail_mask(n - nfull);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < nfull; j += 16) {
      const __m512 e = exp_vec512(_mm512_sub_ps(_mm512_loadu_ps(row + j), vm[r]));
      _mm512_storeu_ps(row + j, e);
      sum = _mm512_add_ps(sum, e);
    }
    et[r] = exp_vec512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mt, row + nfull), vm[r]));
    vsum[r] = _mm512_mask_add_ps(sum, mt, sum, et[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
    if (r < rows) vsum[r] = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum[r]));
  if (stats)
    for (int r = 0; r < rows; r++) {
      stats[2 * (i0 + r)] = _mm512_cvtss_f32(vm[r]);
      stats[2 * (i0 + r) + 1] = _mm512_cvtss_f32(vsum[r]);
    }
  // Phase 3: normalise, store P and its bf16 row.
  for (int r = 0; r < rows; r++) {
    float* row = s + size_t(i0 + r) * T;
    uint16_t* b = p16 + size_t(r) * ld16;
    const int n = i0 + r + 1, nfull = n & ~15;
    const __mmask16 mt = tail_mask(n - nfull);
    const __m512 inv = vsum[r];
    const __m512 pt = _mm512_maskz_mul_ps(mt, et[r], inv);
    if (stats) {  // only the bf16 row is read again: the fp32 row stays exp(s - max)
      for (int j = 0; j < nfull; j += 16)
        store_bf16x16(b + j, _mm512_mul_ps(_mm512_loadu_ps(row + j), inv));
    } else {
      for (int j = 0; j < nfull; j += 16) {
        const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(row + j), inv);
        _mm512_storeu_ps(row + j, p);
        store_bf16x16(b + j, p);
      }
      _mm512_mask_storeu_ps(row + nfull, mt, pt);
      std::memset(row + n, 0, sizeof(float) * size_t(T - n));
    }
    store_bf16_tail(b, nfull, pt, cols);
  }
}

// Rows i0 .. i0 + rows - 1 (rows <= R) of the softmax backward: softmax_backward_row<false>
// each (row i: d[i][0..i] = scale p (d - p . d), d past i left as it was; p and d (T, T)) and
// d16 row r (row stride ld16) = row i0 + r of d in bf16 over [0, cols), zeros past i.
template <int R>
MT_BF16_ROWS_TARGET void softmax_backward_stripe_bf16(float* d, const float* p, int T,
                                                      uint16_t* d16, int ld16, int i0, int rows,
                                                      float scale, int cols) {
  // Phase 1: the rows' dot products, masked_dot16's chains side by side.
  __m512 dot[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) dot[r] = _mm512_setzero_ps();
  const int jmax = (i0 + rows) & ~15;
  for (int j = 0; j < jmax; j += 16)
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
      if (r < rows && j < ((i0 + r + 1) & ~15))
        dot[r] = _mm512_fmadd_ps(_mm512_loadu_ps(p + size_t(i0 + r) * T + j),
                                 _mm512_loadu_ps(d + size_t(i0 + r) * T + j), dot[r]);
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
    if (r >= rows) break;
    const int n = i0 + r + 1, nfull = n & ~15;
    const __mmask16 mt = tail_mask(n - nfull);
    const size_t o = size_t(i0 + r) * T + nfull;
    dot[r] =
        _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mt, p + o), _mm512_maskz_loadu_ps(mt, d + o), dot[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
    if (r < rows) dot[r] = _mm512_set1_ps(_mm512_reduce_add_ps(dot[r]));
  // Phase 2: dS and its bf16 row.
  const __m512 vs = _mm512_set1_ps(scale);
  for (int r = 0; r < rows; r++) {
    float* dr = d + size_t(i0 + r) * T;
    const float* pr = p + size_t(i0 + r) * T;
    uint16_t* b = d16 + size_t(r) * ld16;
    const int n = i0 + r + 1, nfull = n & ~15;
    const __mmask16 mt = tail_mask(n - nfull);
    for (int j = 0; j < nfull; j += 16) {
      const __m512 sp = _mm512_mul_ps(vs, _mm512_loadu_ps(pr + j));
      const __m512 ds = _mm512_mul_ps(sp, _mm512_sub_ps(_mm512_loadu_ps(dr + j), dot[r]));
      _mm512_storeu_ps(dr + j, ds);
      store_bf16x16(b + j, ds);
    }
    const __m512 sp = _mm512_mul_ps(vs, _mm512_maskz_loadu_ps(mt, pr + nfull));
    const __m512 dt =
        _mm512_maskz_mul_ps(mt, sp, _mm512_sub_ps(_mm512_maskz_loadu_ps(mt, dr + nfull), dot[r]));
    _mm512_mask_storeu_ps(dr + nfull, mt, dt);
    store_bf16_tail(b, nfull, dt, cols);
  }
}

#undef MT_BF16_ROWS_TARGET

}  // namespace mt::attention_avx512

#endif  // __AVX512F__
