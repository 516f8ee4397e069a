// Flash attention's products with bf16 operands and fp32 accumulation (--precision bf16):
// _mm512_dpbf16_ps multiplies 16 pairs of bf16 by 16 pairs and adds both products to each
// fp32 lane, so every operand is packed with its reduction index taken two at a time:
//   rows       q, dout: a row's dims (2p, 2p + 1) as pair p (scores' broadcast side);
//   key block  k, v: (hd / 2, 32) pairs, pair p of key j at [p][j] (scores' vector side);
//   reduction  v, k along keys and q, dout along queries: rows 2i and 2i + 1 interleaved,
//              pair (x[2i][d], x[2i + 1][d]) at [i][d];
//   P, dS      per visit: rows as pairs along keys (P v, dS k) or, for the key-side
//              products, pairs along queries at [i][key] (P^T dout, dS^T q).
// Operands are rounded to nearest even by the CPU's conversion (which flushes denormals);
// scores, softmax and every sum are fp32.
// Head dims 16, 32, 64, 128 where the CPU has AVX512-BF16; elsewhere the fp32 kernels run.
#include "kernels/flash_attention_simd.h"
#include "kernels/flash_attention_tiles.h"

#if defined(__AVX512F__)
#include <cstdint>
#endif

namespace mt::flash {

#if defined(__AVX512F__)
namespace {

#define MT_FLASH_BF16 __attribute__((target("avx512bf16")))

constexpr int kB = kFlashKeyBlock;

constexpr int kAhead = 4;  // rows prefetched ahead by the packers

// 16 bf16 of x as the low halves of 16 32-bit lanes.
MT_FLASH_BF16 inline __m512i widened(__m512 x) {
  return _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)));
}

// The pairs (x[2p], x[2p + 1]) of x[d .. d + 31] (HD 16: of x[0 .. 15], 8 pairs, zeros above).
template <int HD>
MT_FLASH_BF16 inline __m512i pairs_at(const float* x, int d) {
  if constexpr (HD >= 32)
    return reinterpret_cast<__m512i>(
        _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + d + 16), _mm512_loadu_ps(x + d)));
  else
    return _mm512_zextsi256_si512(
        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(x))));
}

template <int HD>
MT_FLASH_BF16 void pack_rows(const PackRows& p) {
  alignas(64) float x[HD];
  for (int r = 0; r < p.padded; r++) {
    prefetch_ahead(p, r, kAhead);
    for (int h = 0; h < p.heads; h++) {
      row_or_zero<HD>(x, p, r, h);
      float* dst = p.dst + h * p.head_stride + size_t(r) * (HD / 2);
      if constexpr (HD >= 32)
        for (int d = 0; d < HD; d += 32) _mm512_storeu_si512(dst + d / 2, pairs_at<HD>(x, d));
      else
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                            _mm512_castsi512_si256(pairs_at<HD>(x, 0)));
    }
  }
}

// 16 rows of a head at a time, as pairs, transposed into the block's columns.
template <int HD>
MT_FLASH_BF16 void pack_key_blocks(const PackRows& p) {
  alignas(64) float x[HD], pairs[16 * (HD / 2)];
  for (int r0 = 0; r0 < p.padded; r0 += 16)
    for (int h = 0; h < p.heads; h++) {
      for (int j = 0; j < 16; j++) {
        if (h == 0) prefetch_ahead(p, r0 + j, 16);
        row_or_zero<HD>(x, p, r0 + j, h);
        float* dst = pairs + j * (HD / 2);
        if constexpr (HD >= 32)
          for (int d = 0; d < HD; d += 32) _mm512_storeu_si512(dst + d / 2, pairs_at<HD>(x, d));
        else
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                              _mm512_castsi512_si256(pairs_at<HD>(x, 0)));
      }
      const int j0 = r0 / kB * kB;
      store_columns<HD / 2>(p.dst + h * p.head_stride + size_t(j0) * (HD / 2), r0 - j0, pairs);
    }
}

// Rows 2i and 2i + 1 of the run (an even row of the operand) interleaved element by element.
template <int HD>
MT_FLASH_BF16 void pack_reduction(const PackRows& p) {
  alignas(64) float x0[HD], x1[HD];
  for (int i = 0; i < p.padded / 2; i++) {
    prefetch_ahead(p, 2 * i + 1, kAhead);
    for (int h = 0; h < p.heads; h++) {
      row_or_zero<HD>(x0, p, 2 * i, h);
      row_or_zero<HD>(x1, p, 2 * i + 1, h);
      float* dst = p.dst + h * p.head_stride + size_t(i) * HD;
      for (int d = 0; d < HD; d += 16)
        _mm512_storeu_si512(
            dst + d, _mm512_or_si512(widened(_mm512_loadu_ps(x0 + d)),
                                     _mm512_slli_epi32(widened(_mm512_loadu_ps(x1 + d)), 16)));
    }
  }
}

MT_FLASH_BF16 inline __m512bh slot_vec(const float* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}
MT_FLASH_BF16 inline __m512bh slot_broadcast(float s) {
  return reinterpret_cast<__m512bh>(_mm512_set1_ps(s));
}

template <int HD, int R>
MT_FLASH_BF16 void scores_tile(float* s, const float* x, const float* blk, float alpha) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
  for (int p = 0; p < HD / 2; p++) {
    const __m512bh y0 = slot_vec(blk + p * kB), y1 = slot_vec(blk + p * kB + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const __m512bh xb = slot_broadcast(x[r * (HD / 2) + p]);
      acc0[r] = _mm512_dpbf16_ps(acc0[r], xb, y0);
      acc1[r] = _mm512_dpbf16_ps(acc1[r], xb, y1);
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
MT_FLASH_BF16 void scores_rest(int rows, float* s, const float* x, const float* blk, float alpha) {
  if constexpr (R > 0) {
    if (rows == R) return scores_tile<HD, R>(s, x, blk, alpha);
    scores_rest<HD, R - 1>(rows, s, x, blk, alpha);
  }
}

template <int HD>
MT_FLASH_BF16 void scores(float* s, const float* x, int rows, const float* blk, float alpha, int) {
  constexpr int R = 8;
  int r = 0;
  for (; r + R <= rows; r += R) scores_tile<HD, R>(s + r * kB, x + r * (HD / 2), blk, alpha);
  if (r < rows) scores_rest<HD, R - 1>(rows - r, s + r * kB, x + r * (HD / 2), blk, alpha);
}

// c[r][0:HD] (row stride ldc) += sum over pairs k < n of a[r * ars + k * aks] . b[k][0:HD].
template <int HD, int R>
MT_FLASH_BF16 void rows_tile(float* c, size_t ldc, const float* a, size_t ars, size_t aks,
                             const float* b, int n) {
  constexpr int NV = HD / 16;
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
  for (int k = 0; k < n; k++) {
    __m512bh bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) bv[v] = slot_vec(b + size_t(k) * HD + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const __m512bh ab = slot_broadcast(a[r * ars + k * aks]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ab, bv[v]);
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
MT_FLASH_BF16 void rows_rest(int rows, float* c, size_t ldc, const float* a, size_t ars, size_t aks,
                             const float* b, int n) {
  if constexpr (R > 0) {
    if (rows == R) return rows_tile<HD, R>(c, ldc, a, ars, aks, b, n);
    rows_rest<HD, R - 1>(rows, c, ldc, a, ars, aks, b, n);
  }
}

// c (rows, HD) += a (rows, 32) . r (16 key pairs of HD): a's rows packed as pairs along keys.
template <int HD>
MT_FLASH_BF16 void rows_by_keys(float* c, size_t ldc, const float* a, int rows, const float* r,
                                int) {
  alignas(64) float ap[kFlashQueryBlock * kB / 2];
  for (int i = 0; i < rows; i++) {
    const __m512 lo = _mm512_loadu_ps(a + i * kB), hi = _mm512_loadu_ps(a + i * kB + 16);
    _mm512_store_ps(ap + i * (kB / 2), reinterpret_cast<__m512>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  constexpr int R = rows_per_tile<HD>(), np = kB / 2;
  int i = 0;
  for (; i + R <= rows; i += R) rows_tile<HD, R>(c + i * ldc, ldc, ap + i * np, np, 1, r, np);
  if (i < rows) rows_rest<HD, R - 1>(rows - i, c + i * ldc, ldc, ap + i * np, np, 1, r, np);
}

// c (32, HD) += a^T . r, a (qrows, 32), r the (qrows / 2 rounded up) query pairs of HD:
// a's columns packed as pairs along queries, at[i][j] = (a[2i][j], a[2i + 1][j]).
template <int HD>
MT_FLASH_BF16 void keys_by_rows(float* c, const float* a, int qrows, const float* r, int) {
  alignas(64) float at[kFlashQueryBlock / 2 * kB];
  const int np = (qrows + 1) / 2;
  for (int i = 0; i < np; i++)
    for (int h = 0; h < kB; h += 16) {
      const __m512 x0 = _mm512_loadu_ps(a + 2 * i * kB + h);
      const __m512 x1 =
          2 * i + 1 < qrows ? _mm512_loadu_ps(a + (2 * i + 1) * kB + h) : _mm512_setzero_ps();
      const __m512i pairs = _mm512_or_si512(widened(x0), _mm512_slli_epi32(widened(x1), 16));
      _mm512_store_si512(at + i * kB + h, pairs);
    }
  constexpr int R = rows_per_tile<HD>();
  int j = 0;
  for (; j + R <= kB; j += R) rows_tile<HD, R>(c + j * HD, HD, at + j, 1, kB, r, np);
  if (j < kB) rows_rest<HD, R - 1>(kB - j, c + j * HD, HD, at + j, 1, kB, r, np);
}

template <int HD>
const Tiles* table() {
  static const Tiles t{"avx512-bf16",
                       true,
                       false,
                       pack_rows<HD>,
                       pack_key_blocks<HD>,
                       pack_reduction<HD>,
                       scores<HD>,
                       rows_by_keys<HD>,
                       keys_by_rows<HD>};
  return &t;
}

}  // namespace

const Tiles* tiles_avx512_bf16(int hd) {
  static const bool cpu = __builtin_cpu_supports("avx512bf16");
  if (!cpu) return nullptr;
  return tiles_for_head_dim(hd, [](auto head_dim) { return table<decltype(head_dim)::value>(); });
}

#else  // no AVX-512 in this build: bf16 requests run the fp32 kernels

const Tiles* tiles_avx512_bf16(int) {
  return nullptr;
}

#endif

}  // namespace mt::flash
