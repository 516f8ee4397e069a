#include "kernels/grouped_gemm_pack.h"

#if defined(__AVX512F__)
// GCC 12 reports the self-initialised undefined vectors inside its own unpack and shuffle
// intrinsics as uninitialised (GCC bug 105593); silence that header only, as vec_math.h.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstring>

namespace mt::grouped {

namespace {

__mmask16 first(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// r (16 rows of 16 32-bit elements) = r^T, in four rounds of shuffles: pairs of 32-bit
// elements within 128-bit lanes, then 64-bit pairs (each lane now holds one column of four
// rows), then lanes across registers, twice.
[[gnu::always_inline]] inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // r[4i + j], lane L: column 4L + j of rows 4i .. 4i + 3.
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0xDD);
    }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xDD);
    r[4 + j] = _mm512_shuffle_i32x4(t[4 + j], t[12 + j], 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(t[4 + j], t[12 + j], 0xDD);
  }
}

// 16 uint32 (lo[c] | hi[c] << 16) for the first n columns of two bf16 rows (null: zeros),
// zeros past n: a pair of rows in the layout of a dot-product pair.
[[gnu::always_inline]] inline __m512i pair_rows(const bf16* lo, const bf16* hi, int n) {
  const __mmask16 m = first(n);
  const __m256i l = lo ? _mm256_maskz_loadu_epi16(m, lo) : _mm256_setzero_si256();
  const __m256i h = hi ? _mm256_maskz_loadu_epi16(m, hi) : _mm256_setzero_si256();
  return _mm512_or_si512(_mm512_cvtepu16_epi32(l), _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Loads rows [0, rows) of a 16 x 16 block of 32-bit elements (at src + r * lds_bytes,
// `cols` valid each; the rest zeros), transposes it, and stores the first out_cols elements
// of its first out_rows rows at dst + j * ldd.
[[gnu::always_inline]] inline void transpose_block(uint32_t* dst, size_t ldd, const char* src,
                                                   size_t lds_bytes, int rows, int cols,
                                                   int out_rows, int out_cols = 16) {
  __m512i r[16];
  const __mmask16 m = first(cols), out = first(out_cols);
  for (int i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_epi32(m, src + i * lds_bytes) : _mm512_setzero_si512();
  transpose16(r);
  for (int j = 0; j < out_rows; ++j) _mm512_mask_storeu_epi32(dst + j * ldd, out, r[j]);
}

void pack_fp32_rows(float* dst, const float* b, size_t ldb, int k0, int k1, int n0, int n1) {
  // Panel by panel, so that the stores run through dst in order (row by row, they went to
  // 32 places 32 KB apart and ran at a third of the speed).
  const int kc = k1 - k0, panels = (n1 - n0 + kPanelFp32 - 1) / kPanelFp32;
  for (int p = 0; p < panels; ++p)
    for (int k = k0; k < k1; ++k)
      for (int h = 0; h < 2; ++h) {
        const int n = n0 + p * kPanelFp32 + 16 * h;
        const __m512 v = _mm512_maskz_loadu_ps(first(n1 - n), b + k * ldb + n);
        _mm512_storeu_ps(dst + (size_t(p) * kc + (k - k0)) * kPanelFp32 + 16 * h, v);
      }
}

// B (k, n) = b[n * ldb + k]: 16 columns at a time are 16 source rows, transposed in blocks.
void pack_fp32_trans(float* dst, const float* b, size_t ldb, int k0, int k1, int n0, int n1) {
  const int kc = k1 - k0, panels = (n1 - n0 + kPanelFp32 - 1) / kPanelFp32;
  for (int p = 0; p < panels; ++p)
    for (int h = 0; h < 2; ++h) {
      const int n = n0 + p * kPanelFp32 + 16 * h;
      uint32_t* out = reinterpret_cast<uint32_t*>(dst) + size_t(p) * kc * kPanelFp32 + 16 * h;
      for (int k = k0; k < k1; k += 16)
        transpose_block(out + size_t(k - k0) * kPanelFp32, kPanelFp32,
                        reinterpret_cast<const char*>(b + n * ldb + k), ldb * sizeof(float),
                        std::clamp(n1 - n, 0, 16), std::min(16, k1 - k), std::min(16, k1 - k));
    }
}

void pack_pairs_rows(uint32_t* dst, const bf16* b, size_t ldb, int K, int kp_rows, int n0, int n1) {
  const int panels = (n1 - n0 + kPanelBf16 - 1) / kPanelBf16;
  for (int p = 0; p < panels; ++p) {  // in dst's order, as pack_fp32_rows
    const int n = n0 + p * kPanelBf16;
    for (int kp = 0; kp < kp_rows; ++kp) {
      const int k = 2 * kp;
      const __m512i v = pair_rows(k < K ? b + k * ldb + n : nullptr,
                                  k + 1 < K ? b + (k + 1) * ldb + n : nullptr, n1 - n);
      _mm512_storeu_si512(dst + (size_t(p) * kp_rows + kp) * kPanelBf16, v);
    }
  }
}

// B (k, n) = b[n * ldb + k]: the pairs (2kp, 2kp + 1) of a source row are one 32-bit
// element, so the pair panels are a 32-bit transpose of the rows; an odd K's last pair,
// whose second half is past the row, and the zero rows after it are written one by one.
void pack_pairs_trans(uint32_t* dst, const bf16* b, size_t ldb, int K, int kp_rows, int n0,
                      int n1) {
  const int panels = (n1 - n0 + kPanelBf16 - 1) / kPanelBf16, full = K / 2;
  for (int p = 0; p < panels; ++p) {
    const int n = n0 + p * kPanelBf16, valid = std::clamp(n1 - n, 0, 16);
    uint32_t* out = dst + size_t(p) * kp_rows * kPanelBf16;
    for (int kp = 0; kp < full; kp += 16)
      transpose_block(out + size_t(kp) * kPanelBf16, kPanelBf16,
                      reinterpret_cast<const char*>(b + n * ldb + 2 * kp), ldb * sizeof(bf16),
                      valid, std::min(16, full - kp), std::min(16, full - kp));
    for (int kp = full; kp < kp_rows; ++kp)
      for (int c = 0; c < kPanelBf16; ++c)
        out[size_t(kp) * kPanelBf16 + c] =
            (2 * kp < K && c < valid) ? uint32_t(b[(n + c) * ldb + 2 * kp]) : 0u;
  }
}

}  // namespace

void pack_rows_fp32(float* dst, const float* a, size_t lda, bool trans, int rows, int k0, int k1) {
  const int kc = k1 - k0;
  for (int i0 = 0; i0 < rows; i0 += kRowsFp32) {
    const int valid = std::min(kRowsFp32, rows - i0);
    uint32_t* out = reinterpret_cast<uint32_t*>(dst) + size_t(i0) * kc;
    if (trans) {  // A (i, k) = a[k * lda + i]: a block's k-th row is 12 consecutive elements
      for (int k = k0; k < k1; ++k)
        _mm512_mask_storeu_ps(out + size_t(k - k0) * kRowsFp32, first(kRowsFp32),
                              _mm512_maskz_loadu_ps(first(valid), a + k * lda + i0));
      continue;
    }
    for (int k = k0; k < k1; k += 16)
      transpose_block(out + size_t(k - k0) * kRowsFp32, kRowsFp32,
                      reinterpret_cast<const char*>(a + i0 * lda + k), lda * sizeof(float), valid,
                      std::min(16, k1 - k), std::min(16, k1 - k), kRowsFp32);
  }
}

void pack_row_pairs_bf16(uint32_t* dst, const bf16* a, size_t lda, bool trans, int rows, int k0,
                         int k1) {
  const int kp = (k1 - k0 + 1) / 2, full = (k1 - k0) / 2;
  for (int i0 = 0; i0 < rows; i0 += kRowsFp32) {
    const int valid = std::min(kRowsFp32, rows - i0);
    uint32_t* out = dst + size_t(i0) * kp;
    if (trans) {  // A (i, k) = a[k * lda + i]: a pair is two source rows, side by side
      for (int j = 0; j < kp; ++j) {
        const int k = k0 + 2 * j;
        const __m512i v =
            pair_rows(a + k * lda + i0, k + 1 < k1 ? a + (k + 1) * lda + i0 : nullptr, valid);
        _mm512_mask_storeu_epi32(out + size_t(j) * kRowsFp32, first(kRowsFp32), v);
      }
      continue;
    }
    // A row's pairs are consecutive 32-bit elements: a 32-bit transpose, as pack_rows_fp32;
    // an odd last column has no partner in the row and is paired with zero one by one.
    for (int j = 0; j < full; j += 16)
      transpose_block(out + size_t(j) * kRowsFp32, kRowsFp32,
                      reinterpret_cast<const char*>(a + i0 * lda + k0 + 2 * j), lda * sizeof(bf16),
                      valid, std::min(16, full - j), std::min(16, full - j), kRowsFp32);
    if (full < kp)
      for (int r = 0; r < kRowsFp32; ++r)
        out[size_t(full) * kRowsFp32 + r] = r < valid ? uint32_t(a[(i0 + r) * lda + k1 - 1]) : 0u;
  }
}

void pack_panels_fp32(float* dst, const float* b, size_t ldb, bool trans, int k0, int k1, int n0,
                      int n1) {
  if (trans)
    pack_fp32_trans(dst, b, ldb, k0, k1, n0, n1);
  else
    pack_fp32_rows(dst, b, ldb, k0, k1, n0, n1);
}

void pack_pairs_bf16(uint32_t* dst, const bf16* b, size_t ldb, bool trans, int K, int kp_rows,
                     int n0, int n1) {
  if (trans)
    pack_pairs_trans(dst, b, ldb, K, kp_rows, n0, n1);
  else
    pack_pairs_rows(dst, b, ldb, K, kp_rows, n0, n1);
}

// 32 source rows x 16 columns at a time: rows (2i, 2i + 1) paired into 32-bit elements
// (pair_rows), then a 32-bit transpose puts source column c's 32 values, in row order, in
// one 64-byte row of dst. Rows past `rows` are zeros, which pads dst to whole blocks.
void transpose_bf16_padded(bf16* dst, size_t ldd, const bf16* src, size_t lds, int rows, int cols) {
  const int rows32 = (rows + 31) / 32 * 32;
  for (int r = 0; r < rows32; r += 32)
    for (int c = 0; c < cols; c += 16) {
      __m512i v[16];
      for (int i = 0; i < 16; ++i) {
        const int lo = r + 2 * i, hi = lo + 1;
        v[i] = pair_rows(lo < rows ? src + lo * lds + c : nullptr,
                         hi < rows ? src + hi * lds + c : nullptr, cols - c);
      }
      transpose16(v);
      for (int j = 0; j < std::min(16, cols - c); ++j)
        _mm512_storeu_si512(dst + (c + j) * ldd + r, v[j]);
    }
  for (int c = 0; c < cols; ++c)
    std::memset(dst + c * ldd + rows32, 0, (ldd - std::min<size_t>(ldd, rows32)) * sizeof(bf16));
}

}  // namespace mt::grouped

#endif  // __AVX512F__
