#include "kernels/rmsnorm.h"
#include "kernels/phase_profile.h"

#include <cmath>
#include <cstddef>

namespace mt {

namespace {

// One row's 1 / sqrt(mean(x^2) + eps), shared by the fp32 and bf16-output forward so their
// statistics are the same bits. No centring, so one pass (unlike LayerNorm's two).
inline float row_rstd(const float* x, int C, float eps) {
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int c = 0; c < C; c++) sq += x[c] * x[c];
  return 1.0f / std::sqrt(sq / C + eps);
}

// x (C) += res (C) when res is given: the residual add, on the row the statistics read next
// (the same fp32 additions as add_inplace, so the sum keeps its bits).
inline void add_residual(float* x, const float* res, int C) {
  if (!res) return;
#pragma omp simd
  for (int c = 0; c < C; c++) x[c] += res[c];
}

// The forward over rows, its output stored by `store` (fp32 or rounded to bf16): one pass per
// row, the residual add (when res is given) first, while the row is in cache.
template <class Out, class Store>
void rmsnorm_rows(Out* out, float* rstd, float* inp, const float* res, const float* weight, int N,
                  int C, float eps, Store store) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* x = inp + static_cast<size_t>(n) * C;
    Out* y = out + static_cast<size_t>(n) * C;
    add_residual(x, res ? res + static_cast<size_t>(n) * C : nullptr, C);
    const float s = row_rstd(x, C, eps);
#pragma omp simd
    for (int c = 0; c < C; c++) y[c] = store(weight[c] * (x[c] * s));
    rstd[n] = s;
  }
}

inline float keep_fp32(float v) {
  return v;
}

inline bf16 round_bf16(float v) {
  return float_to_bf16_select(v);
}

// dinp (N, C) = base + the input gradient (base == dinp: accumulate); base[c] + g is the same
// fp32 sum as a copy of base followed by +=.
void rmsnorm_backward_rows(float* dinp, const float* base, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int N, int C) {
  // d/dx_j of sum_i g_i x_i s, s = (mean(x^2) + eps)^-1/2, ds/dx_j = -s^3 x_j / C:
  // dx_j = s (g_j - xhat_j mean(g xhat)).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;
    const float* dy = dout + static_cast<size_t>(n) * C;
    const float* b0 = base + static_cast<size_t>(n) * C;
    float* dx = dinp + static_cast<size_t>(n) * C;
    const float s = rstd[n];
    float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
    for (int c = 0; c < C; c++) sum_gx += dy[c] * weight[c] * (x[c] * s);
    const float mean_gx = sum_gx / C;
#pragma omp simd
    for (int c = 0; c < C; c++) dx[c] = b0[c] + (dy[c] * weight[c] - (x[c] * s) * mean_gx) * s;
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
  PhaseScope phase_scope(Phase::norm, 0, 8.0 * N * C);
  // Without a residual the rows are only read.
  rmsnorm_rows(out, rstd, const_cast<float*>(inp), nullptr, weight, N, C, eps, keep_fp32);
}

void rmsnorm_forward_bf16(bf16* out, float* rstd, const float* inp, const float* weight, int N,
                          int C, float eps) {
  PhaseScope phase_scope(Phase::norm, 0, 6.0 * N * C);
  rmsnorm_rows(out, rstd, const_cast<float*>(inp), nullptr, weight, N, C, eps, round_bf16);
}

void residual_rmsnorm_forward(float* out, float* rstd, float* x, const float* res,
                              const float* weight, int N, int C, float eps) {
  PhaseScope phase_scope(Phase::norm, 0, 16.0 * N * C);
  rmsnorm_rows(out, rstd, x, res, weight, N, C, eps, keep_fp32);
}

void residual_rmsnorm_forward_bf16(bf16* out, float* rstd, float* x, const float* res,
                                   const float* weight, int N, int C, float eps) {
  PhaseScope phase_scope(Phase::norm, 0, 14.0 * N * C);
  rmsnorm_rows(out, rstd, x, res, weight, N, C, eps, round_bf16);
}

void rmsnorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                            const float* rstd, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * N * C);
  rmsnorm_backward_rows(dinp, dinp, dout, inp, weight, rstd, N, C);
}

void residual_rmsnorm_backward_input(float* dinp, const float* dres, const float* dout,
                                     const float* inp, const float* weight, const float* rstd,
                                     int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * N * C);
  rmsnorm_backward_rows(dinp, dres, dout, inp, weight, rstd, N, C);
}

void rmsnorm_backward_weight(float* dweight, const float* dout, const float* inp, const float* rstd,
                             int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 8.0 * N * C);
  // Threads own column blocks and walk all rows: no shared writes, and the result does not
  // depend on the thread count (as layernorm_backward_weight).
  constexpr int kBlock = 64;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
    float dw[kBlock] = {};
    for (int n = 0; n < N; n++) {
      const float* x = inp + static_cast<size_t>(n) * C;
      const float* dy = dout + static_cast<size_t>(n) * C;
      const float s = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; c++) dw[c - c0] += dy[c] * (x[c] * s);
    }
    for (int c = c0; c < c1; c++) dweight[c] += dw[c - c0];
  }
}

}  // namespace mt
