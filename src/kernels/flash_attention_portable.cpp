// Flash attention's products as plain loops (any head dim, any build): the compiler
// vectorises the innermost loops over the 32 keys of a block or the hd dims of a row. The
// fp32 packers here also serve the AVX-512 fp32 kernels, which share their layouts.
#include <cstring>

#include "kernels/flash_attention_tiles.h"

namespace mt::flash {

void pack_rows_fp32(const PackRows& p) {
  for (int r = 0; r < p.padded; r++)
    for (int h = 0; h < p.heads; h++) {
      float* dst = p.dst + h * p.head_stride + size_t(r) * p.hd;
      if (r < p.rows)
        rotated_copy(dst, p.src + r * p.ld + size_t(h) * p.hd, p.pos[r], p.rope, p.hd);
      else
        std::memset(dst, 0, sizeof(float) * p.hd);
    }
}

void pack_key_blocks_fp32(const PackRows& p) {
  float row[kFlashMaxHeadDim];
  for (int r = 0; r < p.padded; r++) {
    const int j0 = r / kFlashKeyBlock * kFlashKeyBlock, j = r - j0;
    for (int h = 0; h < p.heads; h++) {
      if (r < p.rows)
        rotated_copy(row, p.src + r * p.ld + size_t(h) * p.hd, p.pos[r], p.rope, p.hd);
      else
        std::memset(row, 0, sizeof(float) * p.hd);
      float* blk = p.dst + h * p.head_stride + size_t(j0) * p.hd;  // (hd, 32)
      for (int d = 0; d < p.hd; d++) blk[d * kFlashKeyBlock + j] = row[d];
    }
  }
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
  static const Tiles t{"portable",     false,  true,         pack_rows_fp32, pack_key_blocks_fp32,
                       pack_rows_fp32, scores, rows_by_keys, keys_by_rows};
  return t;
}

}  // namespace mt::flash
