// Flash attention's products as plain loops (any head dim, any build): the compiler
// vectorises the innermost loops over the 32 keys of a block or the hd dims of a row. The
// fp32 packers here also serve the AVX-512 fp32 kernels, which share their layouts.
#include <cstring>

#include "kernels/flash_attention_tiles.h"

namespace mt::flash {

void pack_rows_fp32(float* dst, const float* src, size_t ld, int rows, const int* pos,
                    const RopeTable* rope, int hd) {
  for (int r = 0; r < rows; r++)
    rotated_copy(dst + size_t(r) * hd, src + size_t(r) * ld, pos[r], rope, hd);
}

void pack_key_blocks_fp32(float* dst, const float* src, size_t ld, int rows, const int* pos,
                          const RopeTable* rope, int hd) {
  float row[kFlashMaxHeadDim];
  for (int j0 = 0; j0 < rows; j0 += kFlashKeyBlock) {
    float* blk = dst + size_t(j0) * hd;  // (hd, 32)
    for (int j = 0; j < kFlashKeyBlock; j++) {
      if (j0 + j < rows)
        rotated_copy(row, src + size_t(j0 + j) * ld, pos[j0 + j], rope, hd);
      else
        std::memset(row, 0, sizeof(float) * hd);
      for (int d = 0; d < hd; d++) blk[d * kFlashKeyBlock + j] = row[d];
    }
  }
}

void pack_reduction_fp32(float* dst, const float* src, size_t ld, int rows, int padded,
                         const int* pos, const RopeTable* rope, int hd) {
  pack_rows_fp32(dst, src, ld, rows, pos, rope, hd);
  std::memset(dst + size_t(rows) * hd, 0, sizeof(float) * size_t(padded - rows) * hd);
}

namespace {

void scores(float* s, const float* x, int rows, const float* block, float alpha, int hd) {
  for (int r = 0; r < rows; r++) {
    float acc[kFlashKeyBlock] = {};
    const float* xr = x + size_t(r) * hd;
    for (int d = 0; d < hd; d++) {
      const float xd = xr[d];
      const float* bd = block + d * kFlashKeyBlock;
#pragma omp simd
      for (int j = 0; j < kFlashKeyBlock; j++) acc[j] += xd * bd[j];
    }
#pragma omp simd
    for (int j = 0; j < kFlashKeyBlock; j++) s[r * kFlashKeyBlock + j] = alpha * acc[j];
  }
}

void rows_by_keys(float* c, size_t ldc, const float* a, int rows, const float* r, int hd) {
  for (int i = 0; i < rows; i++) {
    float* ci = c + size_t(i) * ldc;
    for (int k = 0; k < kFlashKeyBlock; k++) {
      const float aik = a[i * kFlashKeyBlock + k];
      const float* rk = r + size_t(k) * hd;
#pragma omp simd
      for (int d = 0; d < hd; d++) ci[d] += aik * rk[d];
    }
  }
}

void keys_by_rows(float* c, const float* a, int qrows, const float* r, int hd) {
  for (int j = 0; j < kFlashKeyBlock; j++) {
    float* cj = c + size_t(j) * hd;
    for (int i = 0; i < qrows; i++) {
      const float aij = a[i * kFlashKeyBlock + j];
      const float* ri = r + size_t(i) * hd;
#pragma omp simd
      for (int d = 0; d < hd; d++) cj[d] += aij * ri[d];
    }
  }
}

}  // namespace

const Tiles& tiles_portable() {
  static const Tiles t{
      "portable",          false,  true,         pack_rows_fp32, pack_key_blocks_fp32,
      pack_reduction_fp32, scores, rows_by_keys, keys_by_rows};
  return t;
}

}  // namespace mt::flash
