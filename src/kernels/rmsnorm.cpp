#include "kernels/rmsnorm.h"
#include "kernels/phase_profile.h"

#include <cmath>
#include <cstddef>

#include "kernels/bf16_row_store.h"
#include "kernels/column_chunks.h"
#include "kernels/vec_math.h"

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

// One row's output y = weight * (x * s), stored as fp32 or rounded to bf16 as it is stored:
// one expression for every forward form, so the fp32, bf16 and fused residual outputs agree.
inline void store_row(float* y, const float* x, float s, const float* weight, int C) {
#pragma omp simd
  for (int c = 0; c < C; c++) y[c] = weight[c] * (x[c] * s);
}

// bf16: with AVX-512 16 at a time with the conversion instruction and one special-value test
// per row (bf16_row_store.h): the compiler's form of the integer rounding narrows 32 to 16 bits
// with vpmovdw, slow on Zen (a bf16 row took 1.8x the fp32 one at C 128).
inline void store_row(bf16* y, const float* x, float s, const float* weight, int C) {
#if defined(__AVX512F__)
  const __m512 sv = _mm512_set1_ps(s);
  auto value = [&](int c, __mmask16 m) {
    return _mm512_mul_ps(_mm512_maskz_loadu_ps(m, weight + c),
                         _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), sv));
  };
  bf16_rows::store_row_bf16(y, C, value, value);
#else
#pragma omp simd
  for (int c = 0; c < C; c++) y[c] = float_to_bf16_select(weight[c] * (x[c] * s));
#endif
}

// out (N, C) = rmsnorm(x) with rstd saved; with res, x += res first, row by row (the block's
// residual add, whose sum the norm then reads from L1 instead of a second pass over (N, C)).
template <class Out>
void forward_rows(Out* out, float* rstd, float* x_sum, const float* inp, const float* res,
                  const float* weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const size_t row = static_cast<size_t>(n) * C;
    const float* x = inp + row;
    if (res) {
      float* xs = x_sum + row;
      const float* r = res + row;
#pragma omp simd
      for (int c = 0; c < C; c++) xs[c] += r[c];
      x = xs;
    }
    const float s = row_rstd(x, C, eps);
    store_row(out + row, x, s, weight, C);
    rstd[n] = s;
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
  PhaseScope phase_scope(Phase::norm, 0, 8.0 * N * C);
  forward_rows(out, rstd, nullptr, inp, nullptr, weight, N, C, eps);
}

void rmsnorm_forward_bf16(bf16* out, float* rstd, const float* inp, const float* weight, int N,
                          int C, float eps) {
  PhaseScope phase_scope(Phase::norm, 0, 6.0 * N * C);
  forward_rows(out, rstd, nullptr, inp, nullptr, weight, N, C, eps);
}

void add_rmsnorm_forward(float* out, float* rstd, float* x, const float* res, const float* weight,
                         int N, int C, float eps) {
  // x and res read, x and out written.
  PhaseScope phase_scope(Phase::norm, 0, 16.0 * N * C);
  forward_rows(out, rstd, x, x, res, weight, N, C, eps);
}

void add_rmsnorm_forward_bf16(bf16* out, float* rstd, float* x, const float* res,
                              const float* weight, int N, int C, float eps) {
  PhaseScope phase_scope(Phase::norm, 0, 14.0 * N * C);
  forward_rows(out, rstd, x, x, res, weight, N, C, eps);
}

namespace {
// dx (N, C) = base + d/dinp: base is dx itself (accumulate) or the residual path's gradient,
// or with kZeroBase a literal 0 (base unread; layernorm.cpp's rows say why it is added).
// One body for all, so the fused forms round exactly as a copy (or memset) followed by +=.
template <bool kZeroBase>
void rmsnorm_backward_rows(float* dinp, const float* base, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int N, int C) {
  // d/dx_j of sum_i g_i x_i s, s = (mean(x^2) + eps)^-1/2, ds/dx_j = -s^3 x_j / C:
  // dx_j = s (g_j - xhat_j mean(g xhat)).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;
    const float* dy = dout + static_cast<size_t>(n) * C;
    const float* b = kZeroBase ? nullptr : base + static_cast<size_t>(n) * C;
    float* dx = dinp + static_cast<size_t>(n) * C;
    const float s = rstd[n];
    float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
    for (int c = 0; c < C; c++) sum_gx += dy[c] * weight[c] * (x[c] * s);
    const float mean_gx = sum_gx / C;
#pragma omp simd
    for (int c = 0; c < C; c++)
      dx[c] = (kZeroBase ? 0.0f : b[c]) + (dy[c] * weight[c] - (x[c] * s) * mean_gx) * s;
  }
}
}  // namespace

void rmsnorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                            const float* rstd, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * N * C);
  rmsnorm_backward_rows<false>(dinp, dinp, dout, inp, weight, rstd, N, C);
}

void rmsnorm_backward_input_overwrite(float* dinp, const float* dout, const float* inp,
                                      const float* weight, const float* rstd, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * N * C);  // dout and x read, dx written
  rmsnorm_backward_rows<true>(dinp, nullptr, dout, inp, weight, rstd, N, C);
}

void rmsnorm_backward_input_residual(float* dinp, const float* dres, const float* dout,
                                     const float* inp, const float* weight, const float* rstd,
                                     int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * N * C);
  rmsnorm_backward_rows<false>(dinp, dres, dout, inp, weight, rstd, N, C);
}

namespace {
// Columns [c0, c1) of dweight, summed over all rows in order: a thread's contiguous range of
// columns read row after row, as layernorm_backward_weight (the same bits as 64-column blocks
// walked down the rows, fewer strided reads).
constexpr int kWeightChunk = 2048;  // 8 KB of sums beside the streamed rows

void weight_grad_chunk(float* dweight, const float* dout, const float* inp, const float* rstd,
                       int N, int C, int c0, int c1) {
  float dw[kWeightChunk] = {};
  const int w = c1 - c0;
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C + c0;
    const float* dy = dout + static_cast<size_t>(n) * C + c0;
    const float s = rstd[n];
#pragma omp simd
    for (int c = 0; c < w; c++) dw[c] = mul_add(dy[c], x[c] * s, dw[c]);
  }
  for (int c = 0; c < w; c++) dweight[c0 + c] += dw[c];
}
}  // namespace

void rmsnorm_backward_weight(float* dweight, const float* dout, const float* inp, const float* rstd,
                             int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 8.0 * N * C);
  // Threads own column ranges (multiples of 16: no shared cache line) and walk all rows: no
  // shared writes, and the result does not depend on the thread count.
  for_each_column_chunk(C, kWeightChunk, [&](int c0, int c1) {
    weight_grad_chunk(dweight, dout, inp, rstd, N, C, c0, c1);
  });
}

}  // namespace mt
