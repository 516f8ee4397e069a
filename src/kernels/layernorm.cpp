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
void layernorm_rows(Out* out, float* mean, float* rstd, float* inp, const float* res,
                    const float* weight, const float* bias, int N, int C, Store store) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* x = inp + static_cast<size_t>(n) * C;
    Out* y = out + static_cast<size_t>(n) * C;
    add_residual(x, res ? res + static_cast<size_t>(n) * C : nullptr, C);
    const auto [m, s] = row_stats(x, C);
#pragma omp simd
    for (int c = 0; c < C; c++) y[c] = store((x[c] - m) * s * weight[c] + bias[c]);
    mean[n] = m;
    rstd[n] = s;
  }
}

inline float keep_fp32(float v) {
  return v;
}

// float_to_bf16's rounding written branch-free, so the output loop vectorises.
inline bf16 round_bf16(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? bf16(0x7FC0) : bf16(r);
}

// dinp (N, C) = base + the input gradient (base == dinp: accumulate). With base the residual
// path's gradient this is the residual add fused into the norm's pass: base[c] + g computes
// the same fp32 sum as a copy of base followed by +=.
void layernorm_backward_rows(float* dinp, const float* base, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int N,
                             int C) {
  // rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;
    const float* dy = dout + static_cast<size_t>(n) * C;
    const float* b0 = base + static_cast<size_t>(n) * C;
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
      dx[c] = b0[c] + (dy[c] * weight[c] - mean_g - xhat * mean_gx) * s;
    }
  }
}
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 8.0 * N * C);
  // Without a residual the rows are only read.
  layernorm_rows(out, mean, rstd, const_cast<float*>(inp), nullptr, weight, bias, N, C, keep_fp32);
}

void layernorm_forward_bf16(bf16* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 6.0 * N * C);
  layernorm_rows(out, mean, rstd, const_cast<float*>(inp), nullptr, weight, bias, N, C, round_bf16);
}

void residual_layernorm_forward(float* out, float* mean, float* rstd, float* x, const float* res,
                                const float* weight, const float* bias, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 16.0 * N * C);
  layernorm_rows(out, mean, rstd, x, res, weight, bias, N, C, keep_fp32);
}

void residual_layernorm_forward_bf16(bf16* out, float* mean, float* rstd, float* x,
                                     const float* res, const float* weight, const float* bias,
                                     int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 14.0 * N * C);
  layernorm_rows(out, mean, rstd, x, res, weight, bias, N, C, round_bf16);
}

void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                              const float* mean, const float* rstd, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * N * C);
  layernorm_backward_rows(dinp, dinp, dout, inp, weight, mean, rstd, N, C);
}

void residual_layernorm_backward_input(float* dinp, const float* dres, const float* dout,
                                       const float* inp, const float* weight, const float* mean,
                                       const float* rstd, int N, int C) {
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
