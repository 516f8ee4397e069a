#include "kernels/layernorm.h"
#include "kernels/phase_profile.h"

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace mt {

namespace {
constexpr float kEps = 1e-5f;

struct RowStats {
  float mean, rstd;
};

// One row's mean and reciprocal standard deviation. Two passes over the row (mean, then
// centred variance) rather than E[x^2] - E[x]^2, which cancels badly for rows with a large
// mean. Shared by the fp32 and bf16-output forward, so their statistics are the same bits.
inline RowStats row_stats(const float* x, int C) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; c++) sum += x[c];
  const float m = sum / C;
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int c = 0; c < C; c++) {
    float d = x[c] - m;
    sq += d * d;
  }
  return {m, 1.0f / std::sqrt(sq / C + kEps)};
}
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 8.0 * N * C);
  // inp, out are (N, C); mean, rstd are (N).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;
    float* y = out + static_cast<size_t>(n) * C;
    const auto [m, s] = row_stats(x, C);
#pragma omp simd
    for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_forward_bf16(bf16* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 6.0 * N * C);
  // layernorm_forward's statistics and output expression, with the output rounded as
  // float_to_bf16 does, written branch-free so it vectorises.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;
    bf16* y = out + static_cast<size_t>(n) * C;
    const auto [m, s] = row_stats(x, C);
#pragma omp simd
    for (int c = 0; c < C; c++) {
      const uint32_t u = std::bit_cast<uint32_t>((x[c] - m) * s * weight[c] + bias[c]);
      const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
      y[c] = (u & 0x7FFFFFFFu) > 0x7F800000u ? bf16(0x7FC0) : bf16(r);
    }
    mean[n] = m;
    rstd[n] = s;
  }
}

namespace {
// dx (N, C) = base + d/dinp: base is dx itself (accumulate) or the residual path's gradient.
// One body for both, so the fused residual form rounds exactly as a copy followed by +=.
void layernorm_backward_rows(float* dinp, const float* base, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int N,
                             int C) {
  // dinp = base + rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;
    const float* dy = dout + static_cast<size_t>(n) * C;
    const float* b = base + static_cast<size_t>(n) * C;
    float* dx = dinp + static_cast<size_t>(n) * C;
    float m = mean[n], s = rstd[n];
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int c = 0; c < C; c++) {
      float g = dy[c] * weight[c];
      sum_g += g;
      sum_gx += g * ((x[c] - m) * s);
    }
    float mean_g = sum_g / C, mean_gx = sum_gx / C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      float xhat = (x[c] - m) * s;
      dx[c] = b[c] + (dy[c] * weight[c] - mean_g - xhat * mean_gx) * s;
    }
  }
}
}  // namespace

void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                              const float* mean, const float* rstd, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * N * C);
  layernorm_backward_rows(dinp, dinp, dout, inp, weight, mean, rstd, N, C);
}

void layernorm_backward_input_residual(float* dinp, const float* dres, const float* dout,
                                       const float* inp, const float* weight, const float* mean,
                                       const float* rstd, int N, int C) {
  // The bytes of layernorm_backward_input's: dres is read where dinp was.
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * N * C);
  layernorm_backward_rows(dinp, dres, dout, inp, weight, mean, rstd, N, C);
}

void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 8.0 * N * C);
  // dweight, dbias are (C). Threads own column blocks and walk all rows: no shared writes,
  // contiguous inner loops, and the result does not depend on the thread count.
  constexpr int kBlock = 64;
  int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
    float dw[kBlock] = {}, db[kBlock] = {};
    for (int n = 0; n < N; n++) {
      const float* x = inp + static_cast<size_t>(n) * C;
      const float* dy = dout + static_cast<size_t>(n) * C;
      float m = mean[n], s = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; c++) {
        dw[c - c0] += dy[c] * ((x[c] - m) * s);
        db[c - c0] += dy[c];
      }
    }
    for (int c = c0; c < c1; c++) {
      dweight[c] += dw[c - c0];
      dbias[c] += db[c - c0];
    }
  }
}

}  // namespace mt
