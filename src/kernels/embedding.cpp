#include "kernels/embedding.h"
#include "kernels/phase_profile.h"

#include <cstddef>

namespace mt {

void embedding_forward(float* out, const int* idx, const float* wte, const float* wpe, int B, int T,
                       int C, int64_t vocab_start, int vocab_rows, const int* pos) {
  PhaseScope phase_scope(Phase::embedding, 0, 12.0 * B * T * C);
  // out is (B, T, C), idx is (B, T), wte is (vocab_rows, C), wpe is (>= max pos + 1, C).
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    float* o = out + static_cast<size_t>(bt) * C;
    const int64_t row = idx[bt] - vocab_start;
    bool local = row >= 0 && row < vocab_rows;
    const float* w = wte + static_cast<size_t>(local ? row : 0) * C;
    const int t = pos ? pos[bt % T] : bt % T;
    const float* p = wpe ? wpe + static_cast<size_t>(t) * C : nullptr;
    if (local && p) {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = w[c] + p[c];
    } else if (local) {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = w[c];
    } else if (p) {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = p[c];
    } else {
      for (int c = 0; c < C; c++) o[c] = 0.0f;
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* idx, int B, int T,
                        int C, int64_t vocab_start, int vocab_rows, const int* pos) {
  PhaseScope phase_scope(Phase::embedding, 0, 12.0 * B * T * C);
  // Tokens repeat, so rows of dwte receive several updates: threads split the columns instead
  // of the tokens, which keeps writes disjoint and the summation order fixed.
  constexpr int kBlock = 64;
  int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int bt = 0; bt < B * T; bt++) {
      const float* d = dout + static_cast<size_t>(bt) * C;
      const int64_t row = idx[bt] - vocab_start;
      if (row >= 0 && row < vocab_rows) {
        float* w = dwte + static_cast<size_t>(row) * C;
#pragma omp simd
        for (int c = c0; c < c1; c++) w[c] += d[c];
      }
      if (dwpe) {
        const int t = pos ? pos[bt % T] : bt % T;
        float* p = dwpe + static_cast<size_t>(t) * C;
#pragma omp simd
        for (int c = c0; c < c1; c++) p[c] += d[c];
      }
    }
  }
}

}  // namespace mt
