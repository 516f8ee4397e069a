// The AVX512-BF16 attention kernel's packers (attention_bf16_avx512.cpp): fp32 rows of q, k, v,
// dout, P and dS rounded to bf16 and laid out as the kernel's products read them, the reduction
// index taken two at a time as 32-bit "pairs" (element k low, k + 1 high). The layouts are
// described in the kernel's header comment; each packer states its own below.
//
// Included only by attention_bf16_avx512.cpp, in AVX-512 builds.
#pragma once

#if defined(__AVX512F__)
#include <algorithm>
#include <cstdint>

#include "kernels/attention_avx512_tiles.h"

namespace mt::attention_avx512 {

#define MT_BF16_PACK_TARGET __attribute__((target("avx512bf16")))

using u32 = uint32_t;

constexpr int round_up(int x, int m) {
  return (x + m - 1) / m * m;
}

// 32 floats -> 16 pairs (element 2i low, 2i + 1 high), rounded to nearest even.
MT_BF16_PACK_TARGET inline __m512i pairs32(__m512 lo16, __m512 hi16) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi16, lo16));
}
// 16 floats -> 16 bf16 (a 256-bit vector).
MT_BF16_PACK_TARGET inline __m256i bf16x16(__m512 x) {
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
}

// The pairs of s[0 .. 31] (HD >= 32) or of s[0 .. 15] in the low half, zeros above (HD 16).
template <int HD>
MT_BF16_PACK_TARGET inline __m512i row_pairs(const float* s) {
  if constexpr (HD >= 32)
    return pairs32(_mm512_loadu_ps(s), _mm512_loadu_ps(s + 16));
  else
    return _mm512_zextsi256_si512(bf16x16(_mm512_loadu_ps(s)));
}

// x (T, HD / 2) pairs = rows of src (row stride ld).
template <int HD>
MT_BF16_PACK_TARGET void pack_rows(u32* x, const float* src, int ld, int T) {
  for (int r = 0; r < T; r++) {
    const float* s = src + size_t(r) * ld;
    u32* dst = x + size_t(r) * (HD / 2);
    if constexpr (HD >= 32) {
      for (int d = 0; d < HD; d += 32) _mm512_storeu_si512(dst + d / 2, row_pairs<HD>(s + d));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), bf16x16(_mm512_loadu_ps(s)));
    }
  }
}

// yt: for each block of 32 rows of y (rows >= T zero), (HD / 2, 32) pairs, i.e. yt[p][j] =
// (y[j][2p], y[j][2p + 1]). Blocks follow each other (HD / 2 * 32 pairs apart).
template <int HD>
MT_BF16_PACK_TARGET void pack_key_blocks(u32* yt, const float* y, int ldy, int T) {
  for (int j0 = 0; j0 < T; j0 += kKeyBlock) {
    u32* blk = yt + size_t(j0 / kKeyBlock) * (HD / 2) * kKeyBlock;
    for (int half = 0; half < 2; half++)
      for (int d0 = 0; d0 < HD; d0 += 32) {
        __m512 r[16];
        for (int j = 0; j < 16; j++) {
          const int row = j0 + half * 16 + j;
          const float* s = y + size_t(row) * ldy + d0;
          r[j] = row < T ? _mm512_castsi512_ps(row_pairs<HD>(s)) : _mm512_setzero_ps();
        }
        transpose16(r);  // 32-bit lanes: moves pairs whole
        for (int c = 0; c < std::min(16, HD / 2); c++)
          _mm512_storeu_si512(blk + (d0 / 2 + c) * kKeyBlock + half * 16,
                              _mm512_castps_si512(r[c]));
      }
  }
}

// b (Tp / 2, HD) pairs: b[kp][d] = (y[2 kp][d], y[2 kp + 1][d]), rows >= T zero.
template <int HD>
MT_BF16_PACK_TARGET void pack_interleaved(u32* b, const float* y, int ldy, int T, int Tp) {
  for (int kp = 0; kp < Tp / 2; kp++) {
    const int r0 = 2 * kp, r1 = r0 + 1;
    for (int d = 0; d < HD; d += 16) {
      const __m512 y0 = r0 < T ? _mm512_loadu_ps(y + size_t(r0) * ldy + d) : _mm512_setzero_ps();
      const __m512 y1 = r1 < T ? _mm512_loadu_ps(y + size_t(r1) * ldy + d) : _mm512_setzero_ps();
      const __m512i lo = _mm512_cvtepu16_epi32(bf16x16(y0));
      const __m512i hi = _mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16x16(y1)), 16);
      _mm512_storeu_si512(b + size_t(kp) * HD + d, _mm512_or_si512(lo, hi));
    }
  }
}

// b (Tp / 2, HD) pairs as pack_interleaved<HD>(b, y, ...) packs them, from x = pack_rows<HD>
// of the same y instead of y: both round each element to nearest even alike, so one
// permutation of two packed rows gives the same words without reading y's fp32 rows again.
template <int HD>
MT_BF16_PACK_TARGET void interleave_packed_rows(u32* b, const u32* x, int T, int Tp) {
  alignas(64) static constexpr uint16_t kLo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                   37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                   11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                   53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                   27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(kLo), hi = _mm512_load_si512(kHi);
  auto row = [&](int r, int d) {  // elements d .. d + 31 of row r (HD 16: d .. 15, zeros above)
    if (r >= T) return _mm512_setzero_si512();
    const u32* src = x + size_t(r) * (HD / 2) + d / 2;
    if constexpr (HD >= 32)
      return _mm512_loadu_si512(src);
    else
      return _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  };
  for (int kp = 0; kp < Tp / 2; kp++)
    for (int d = 0; d < HD; d += 32) {
      const __m512i a = row(2 * kp, d), c = row(2 * kp + 1, d);
      _mm512_storeu_si512(b + size_t(kp) * HD + d, _mm512_permutex2var_epi16(a, lo, c));
      if constexpr (HD >= 32)
        _mm512_storeu_si512(b + size_t(kp) * HD + d + 16, _mm512_permutex2var_epi16(a, hi, c));
    }
}

// dst (ceil(T / 2), Tp) pairs of consecutive rows of the lower triangle of src (T, T):
// dst[kp][j] = (src[2 kp][j], src[2 kp + 1][j]), entries above src's diagonal (j > i) and
// rows >= T zero, whatever src holds there. The key-side products (dk, dv) reduce over query
// rows, and these are their broadcast pairs (row j of the transpose, pair kp) read down a
// column, so no (T, T) transpose is needed: two rows are rounded into one vector and
// interleaved by one permutation. Columns past round_up(2 kp + 2, 16) + 16 are not written
// (a key tile at j0 reads pairs kp >= j0 / 2, so columns up to 2 kp + 1 + R only).
MT_BF16_PACK_TARGET inline void pack_row_pairs(u32* dst, const float* src, int T, int Tp) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  for (int kp = 0; 2 * kp < T; kp++) {
    const int i0 = 2 * kp, i1 = i0 + 1;
    const int jend = std::min(Tp, round_up(i0 + 2, 16) + 16);
    const float* s0 = src + size_t(i0) * T;
    const float* s1 = src + size_t(i1) * T;
    u32* d = dst + size_t(kp) * Tp;
    for (int j = 0; j < jend; j += 16) {
      const __m512 a = _mm512_maskz_loadu_ps(tail_mask(std::min(T, i0 + 1) - j), s0 + j);
      const __m512 b = i1 < T ? _mm512_maskz_loadu_ps(tail_mask(std::min(T, i1 + 1) - j), s1 + j)
                              : _mm512_setzero_ps();
      const __m512i ab = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));  // a low, b high
      _mm512_storeu_si512(d + j, _mm512_permutexvar_epi16(idx, ab));
    }
  }
}

#undef MT_BF16_PACK_TARGET

}  // namespace mt::attention_avx512

#endif  // __AVX512F__
