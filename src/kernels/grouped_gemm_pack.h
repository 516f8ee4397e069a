// Packing for the grouped GEMMs' micro-kernels (internal; grouped_gemm_work.h's operands).
// A micro-kernel streams its B operand as panels of consecutive columns, each panel a
// contiguous (K, width) block, so that a step in K is one aligned row of the panel whatever
// the source's layout (a transposed weight, a weight, a block of rows):
//   fp32:  panel p of 32 columns, k-th row at dst + (p * kc + k) * 32 floats
//   bf16:  the pair layout of AMX and AVX512-BF16 dot products (VNNI): panel p of 16
//          columns, row kp holds 16 (B (2kp, n), B (2kp + 1, n)) bf16 pairs, one uint32 each
// Columns past N and rows past K are zeros, so a micro-kernel never needs a tail in K or N.
// Built only where the compiler targets AVX-512 (the micro-kernels' precondition).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/bf16.h"

namespace mt::grouped {

constexpr int kPanelFp32 = 32;  // columns of an fp32 panel (two zmm)
constexpr int kRowsFp32 = 12;   // rows of an fp32 block of A (12 x 32 accumulators)
constexpr int kPanelBf16 = 16;  // columns of a bf16 pair panel (one AMX tile's 64 bytes)

// Pair rows of each panel of a weight packed whole (grouped_bf16_pack): K padded to the AMX
// kernel's step of 32, so that both bf16 kernels read the same packs.
inline int packed_panel_pairs(int K) {
  return (K + 31) / 32 * 16;
}

// dst: panels of B rows [k0, k1), columns [n0, n1), rounded up to whole panels.
// B (k, n) = b[k * ldb + n], or b[n * ldb + k] when trans.
void pack_panels_fp32(float* dst, const float* b, size_t ldb, bool trans, int k0, int k1, int n0,
                      int n1);

// dst: blocks of kRowsFp32 rows of A rows [0, rows), K columns [k0, k1): block b at
// dst + b * kRowsFp32 * (k1 - k0), its k-th column at + (k - k0) * kRowsFp32 (the rows a
// micro-kernel broadcasts at step k, side by side). A (i, k) = a[i * lda + k], or
// a[k * lda + i] when trans. A short last block's missing rows are left undefined.
void pack_rows_fp32(float* dst, const float* a, size_t lda, bool trans, int rows, int k0, int k1);

// dst: blocks of kRowsFp32 rows of A rows [0, rows) as bf16 pairs of K columns [k0, k1)
// (k0 even): block b at dst + b * kRowsFp32 * kp, kp = (k1 - k0 + 1) / 2 pairs, its pair j
// (A (i, k0 + 2j), A (i, k0 + 2j + 1)) at + j * kRowsFp32 (a zero half past k1). The layout
// of pack_rows_fp32 for the AVX512-BF16 micro-kernel, which broadcasts one pair per row.
void pack_row_pairs_bf16(uint32_t* dst, const bf16* a, size_t lda, bool trans, int rows, int k0,
                         int k1);

// dst: pair panels of B rows [0, K) padded with zero rows to kp_rows pairs, columns [n0, n1)
// rounded up to whole panels. B (k, n) as pack_panels_fp32.
void pack_pairs_bf16(uint32_t* dst, const bf16* b, size_t ldb, bool trans, int K, int kp_rows,
                     int n0, int n1);

// dst (cols, ldd) = src^T for bf16 src (rows, lds); dst's columns [rows, ldd) are zeroed.
void transpose_bf16_padded(bf16* dst, size_t ldd, const bf16* src, size_t lds, int rows, int cols);

}  // namespace mt::grouped
