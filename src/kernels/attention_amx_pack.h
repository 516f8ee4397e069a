// The AMX attention core's operand packers and result stores (attention_amx.cpp, whose
// header comment names the layouts). bf16 operands are rounded to nearest even by the
// CPU's conversion, as the AVX512-BF16 kernel rounds them; outputs stored as bf16 round
// as to_bf16 does. Included by attention_amx.cpp only, in AVX-512 builds.
#pragma once

#if defined(__AVX512F__)
#include "kernels/attention_amx_tiles.h"
#include "kernels/attention_avx512_tiles.h"  // transpose16, tail_mask

namespace mt::attention_amx {

using attention_avx512::tail_mask;
using attention_avx512::transpose16;

MT_AMX_ATT inline __m256i to_bf16x16(__m512 x) {
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
}

// Two 16-float vectors as 16 pairs (lo in the low halves).
MT_AMX_ATT inline __m512i pairs16(__m512 lo, __m512 hi) {
  return _mm512_or_si512(_mm512_cvtepu16_epi32(to_bf16x16(lo)),
                         _mm512_slli_epi32(_mm512_cvtepu16_epi32(to_bf16x16(hi)), 16));
}

MT_AMX_ATT inline void store16(float* dst, __m512 v, bool accumulate) {
  _mm512_storeu_ps(dst, accumulate ? _mm512_add_ps(_mm512_loadu_ps(dst), v) : v);
}
MT_AMX_ATT inline void store16(bf16* dst, __m512 v, bool) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), round_bf16x16(v));
}

// dst (Tp, HD) bf16 = rows of src (row stride ld), rows >= T zero.
template <int HD>
MT_AMX_ATT void pack_bf16_rows(bf16* dst, const float* src, int ld, int T, int Tp) {
  for (int r = 0; r < Tp; r++)
    for (int d = 0; d < HD; d += 16) {
      const __m512 x = r < T ? _mm512_loadu_ps(src + size_t(r) * ld + d) : _mm512_setzero_ps();
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + size_t(r) * HD + d), to_bf16x16(x));
    }
}

// dst (HD / 2, Tp) pairs: dst[p][j] = (src[j][2p], src[j][2p + 1]), keys >= T zero.
template <int HD>
MT_AMX_ATT void pack_key_pairs(u32* dst, const float* src, int ld, int T, int Tp) {
  for (int j0 = 0; j0 < Tp; j0 += 16)
    for (int p0 = 0; p0 < HD / 2; p0 += 16) {
      __m512 r[16];
      for (int j = 0; j < 16; j++) {
        const float* s = src + size_t(j0 + j) * ld + 2 * p0;
        r[j] = j0 + j < T ? _mm512_castsi512_ps(reinterpret_cast<__m512i>(
                                _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + 16), _mm512_loadu_ps(s))))
                          : _mm512_setzero_ps();
      }
      transpose16(r);  // 32-bit lanes: moves pairs whole
      for (int p = 0; p < 16; p++)
        _mm512_storeu_si512(dst + size_t(p0 + p) * Tp + j0, _mm512_castps_si512(r[p]));
    }
}

// dst (Tp / 2, HD) pairs: dst[i][d] = (src[2i][d], src[2i + 1][d]), rows >= T zero.
template <int HD>
MT_AMX_ATT void pack_interleaved(u32* dst, const float* src, int ld, int T, int Tp) {
  for (int i = 0; i < Tp / 2; i++) {
    const int r0 = 2 * i, r1 = r0 + 1;
    for (int d = 0; d < HD; d += 16) {
      const __m512 y0 = r0 < T ? _mm512_loadu_ps(src + size_t(r0) * ld + d) : _mm512_setzero_ps();
      const __m512 y1 = r1 < T ? _mm512_loadu_ps(src + size_t(r1) * ld + d) : _mm512_setzero_ps();
      _mm512_storeu_si512(dst + size_t(i) * HD + d, pairs16(y0, y1));
    }
  }
}

// dst (HD, Tp) bf16 = src (T, HD) transposed, columns >= T zero.
template <int HD>
MT_AMX_ATT void pack_columns(bf16* dst, const float* src, int ld, int T, int Tp) {
  for (int i0 = 0; i0 < Tp; i0 += 16)
    for (int d0 = 0; d0 < HD; d0 += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; i++)
        r[i] = i0 + i < T ? _mm512_loadu_ps(src + size_t(i0 + i) * ld + d0) : _mm512_setzero_ps();
      transpose16(r);
      for (int d = 0; d < 16; d++)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + size_t(d0 + d) * Tp + i0),
                            to_bf16x16(r[d]));
    }
}

}  // namespace mt::attention_amx

#endif  // __AVX512F__
