// AVX-512 helpers of flash attention's packers (flash_attention_avx512.cpp, _bf16.cpp): a row
// loaded and rotated, prefetches, and the in-register 16 x 16 transpose that turns 16 key
// rows into the columns of a key block (a scatter per row cost a quarter of the forward).
#pragma once

#if defined(__AVX512F__)
#include <cstddef>

#include "kernels/flash_attention_tiles.h"
#include "kernels/rope.h"
#include "kernels/vec_math.h"  // <immintrin.h>

namespace mt::flash {

// x (HD floats) = src's row, rotated to pos when rope (rope_rotate, as rope_forward does it).
template <int HD>
inline void load_row(float* x, const float* src, int pos, const RopeTable* rope) {
  for (int i = 0; i < HD; i += 16) _mm512_storeu_ps(x + i, _mm512_loadu_ps(src + i));
  if (rope) rope_rotate(x, rope->cos(pos), rope->sin(pos), HD / 2);
}

// Run row r of head h (rotated), or zeros past the run's rows.
template <int HD>
inline void row_or_zero(float* x, const PackRows& p, int r, int h) {
  if (r < p.rows) return load_row<HD>(x, p.src + r * p.ld + h * HD, p.pos[r], p.rope);
  for (int i = 0; i < HD; i += 16) _mm512_storeu_ps(x + i, _mm512_setzero_ps());
}

// Every head of run row r + ahead, into L2 while the rows before it are packed.
inline void prefetch_ahead(const PackRows& p, int r, int ahead) {
  if (r + ahead >= p.rows) return;
  const float* src = p.src + (r + ahead) * p.ld;
  for (size_t i = 0; i < size_t(p.heads) * p.hd; i += 16)
    _mm_prefetch(reinterpret_cast<const char*>(src + i), _MM_HINT_T1);
}

// r[0..15] (rows of 16 32-bit lanes) transposed in place: r[c] holds lane c of every row.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 2]);
    const __m512d c = _mm512_castps_pd(t[i + 1]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  // r[4g + c] now holds, in 128-bit lane L, column 4L + c of rows 4g .. 4g + 3.
  for (int i = 0; i < 16; i += 8)
    for (int c = 0; c < 4; c++) {
      t[i + c] = _mm512_shuffle_f32x4(r[i + c], r[i + 4 + c], 0x88);
      t[i + 4 + c] = _mm512_shuffle_f32x4(r[i + c], r[i + 4 + c], 0xdd);
    }
  for (int c = 0; c < 8; c++) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
  }
}

// x (16 rows of W 32-bit lanes, row-major) into a key block's columns col .. col + 15:
// blk[c * kFlashKeyBlock + col + j] = x[j][c] for c < W.
template <int W>
inline void store_columns(float* blk, int col, const float* x) {
  for (int c0 = 0; c0 < W; c0 += 16) {
    __m512 r[16];
    constexpr __mmask16 lanes = W >= 16 ? 0xFFFF : __mmask16((1u << W) - 1);
    for (int j = 0; j < 16; j++) r[j] = _mm512_maskz_loadu_ps(lanes, x + j * W + c0);
    transpose16(r);
    for (int c = 0; c < 16 && c0 + c < W; c++)
      _mm512_storeu_ps(blk + (c0 + c) * kFlashKeyBlock + col, r[c]);
  }
}

}  // namespace mt::flash

#endif
