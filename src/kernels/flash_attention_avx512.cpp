// Flash attention's fp32 products, register-blocked for AVX-512 at head dims 16, 32, 64 and
// 128, in the portable layouts (rows, (hd, 32) key blocks, rows again for the reductions)
// with vectorised packers. Two micro-kernels, as in attention_avx512.cpp:
//  - scores_tile: 8 query rows x 32 keys, one broadcast of x[r][d] times the two vectors of
//    the key block's row d (16 accumulators);
//  - rows_tile: c[r][0:hd] += sum_k a(r, k) b[k][0:hd] with a addressed by strides, so the
//    same code multiplies by P or dS (out, dq: rows by keys) and by their transposes (dv, dk:
//    keys by rows); R rows x hd / 16 vectors stay within 24 accumulators.
#include "kernels/flash_attention_simd.h"
#include "kernels/flash_attention_tiles.h"

namespace mt::flash {

#if defined(__AVX512F__)
namespace {

constexpr int kB = kFlashKeyBlock;
constexpr int kAhead = 8;  // rows prefetched ahead by the packers

// ---- packing: the portable layouts, vector loads, the transpose by scatter --------------

template <int HD>
void pack_rows(const PackRows& p) {
  for (int r = 0; r < p.padded; r++) {
    prefetch_ahead(p, r, kAhead);
    for (int h = 0; h < p.heads; h++)
      row_or_zero<HD>(p.dst + h * p.head_stride + size_t(r) * HD, p, r, h);
  }
}

// 16 rows of a head at a time, rotated into x, transposed into the block's columns.
template <int HD>
void pack_key_blocks(const PackRows& p) {
  alignas(64) float x[16 * HD];
  for (int r0 = 0; r0 < p.padded; r0 += 16)
    for (int h = 0; h < p.heads; h++) {
      for (int j = 0; j < 16; j++) {
        if (h == 0) prefetch_ahead(p, r0 + j, 16);
        row_or_zero<HD>(x + j * HD, p, r0 + j, h);
      }
      const int j0 = r0 / kB * kB;
      store_columns<HD>(p.dst + h * p.head_stride + size_t(j0) * HD, r0 - j0, x);
    }
}

// ---- products ---------------------------------------------------------------------------

template <int HD, int R>
void scores_tile(float* s, const float* x, const float* blk, float alpha) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
  for (int d = 0; d < HD; d++) {
    const __m512 y0 = _mm512_loadu_ps(blk + d * kB), y1 = _mm512_loadu_ps(blk + d * kB + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const __m512 xb = _mm512_set1_ps(x[r * HD + d]);
      acc0[r] = _mm512_fmadd_ps(xb, y0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(xb, y1, acc1[r]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
    _mm512_storeu_ps(s + r * kB, _mm512_mul_ps(acc0[r], va));
    _mm512_storeu_ps(s + r * kB + 16, _mm512_mul_ps(acc1[r], va));
  }
}

template <int HD, int R>
void scores_rest(int rows, float* s, const float* x, const float* blk, float alpha) {
  if constexpr (R > 0) {
    if (rows == R) return scores_tile<HD, R>(s, x, blk, alpha);
    scores_rest<HD, R - 1>(rows, s, x, blk, alpha);
  }
}

template <int HD>
void scores(float* s, const float* x, int rows, const float* blk, float alpha, int) {
  constexpr int R = 8;
  int r = 0;
  for (; r + R <= rows; r += R) scores_tile<HD, R>(s + r * kB, x + r * HD, blk, alpha);
  if (r < rows) scores_rest<HD, R - 1>(rows - r, s + r * kB, x + r * HD, blk, alpha);
}

// c[r][0:HD] (row stride ldc) += sum over k < n of a[r * ars + k * aks] * b[k][0:HD].
template <int HD, int R>
void rows_tile(float* c, size_t ldc, const float* a, size_t ars, size_t aks, const float* b,
               int n) {
  constexpr int NV = HD / 16;
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
  for (int k = 0; k < n; k++) {
    __m512 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(b + size_t(k) * HD + 16 * v);
    const float* ak = a + k * aks;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const __m512 ab = _mm512_set1_ps(ak[r * ars]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(ab, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) {
      float* cp = c + r * ldc + 16 * v;
      _mm512_storeu_ps(cp, _mm512_add_ps(_mm512_loadu_ps(cp), acc[r][v]));
    }
}

template <int HD, int R>
void rows_rest(int rows, float* c, size_t ldc, const float* a, size_t ars, size_t aks,
               const float* b, int n) {
  if constexpr (R > 0) {
    if (rows == R) return rows_tile<HD, R>(c, ldc, a, ars, aks, b, n);
    rows_rest<HD, R - 1>(rows, c, ldc, a, ars, aks, b, n);
  }
}

// The key-side products have 32 output rows: a count dividing 32, at 16 accumulators.
template <int HD>
constexpr int key_rows_per_tile() {
  return HD <= 32 ? 8 : HD == 64 ? 4 : 2;
}

// c (rows, HD) += a (rows, 32) . r (32 rows of HD).
template <int HD>
void rows_by_keys(float* c, size_t ldc, const float* a, int rows, const float* r, int) {
  constexpr int R = rows_per_tile<HD>();
  int i = 0;
  for (; i + R <= rows; i += R) rows_tile<HD, R>(c + i * ldc, ldc, a + i * kB, kB, 1, r, kB);
  if (i < rows) rows_rest<HD, R - 1>(rows - i, c + i * ldc, ldc, a + i * kB, kB, 1, r, kB);
}

// c (32, HD) += a^T . r, a (qrows, 32), r (qrows, HD).
template <int HD>
void keys_by_rows(float* c, const float* a, int qrows, const float* r, int) {
  constexpr int R = key_rows_per_tile<HD>();
  int j = 0;
  for (; j + R <= kB; j += R) rows_tile<HD, R>(c + j * HD, HD, a + j, 1, kB, r, qrows);
  if (j < kB) rows_rest<HD, R - 1>(kB - j, c + j * HD, HD, a + j, 1, kB, r, qrows);
}

template <int HD>
const Tiles* table() {
  static const Tiles t{"avx512-fp32",       false,         true,       pack_rows<HD>,
                       pack_key_blocks<HD>, pack_rows<HD>, scores<HD>, rows_by_keys<HD>,
                       keys_by_rows<HD>};
  return &t;
}

}  // namespace

const Tiles* tiles_avx512_fp32(int hd) {
  return tiles_for_head_dim(hd, [](auto head_dim) { return table<decltype(head_dim)::value>(); });
}

#else  // no AVX-512 in this build: the portable loops run

const Tiles* tiles_avx512_fp32(int) {
  return nullptr;
}

#endif

}  // namespace mt::flash
