#include "kernels/layernorm.h"
#include "kernels/phase_profile.h"

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/bf16_row_store.h"
#include "kernels/column_chunks.h"
#include "kernels/reduce.h"
#include "kernels/vec_math.h"

namespace mt {

namespace {
constexpr float kEps = 1e-5f;

struct RowStats {
  float mean, rstd;
};

// One row's mean and reciprocal standard deviation. Two passes over the row (mean, then
// centred variance) rather than E[x^2] - E[x]^2, which cancels badly for rows with a large
// mean. Shared by the fp32 and bf16-output forward, so their statistics are the same bits.
// Inlined: a call per row is a tenth of a d128 row's time.
[[gnu::always_inline]] inline RowStats row_stats(const float* x, int C) {
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

// One row's output y = (x - m) * s * w + b: the expression every forward form stores, so the
// fp32 and bf16 outputs and the fused residual form round alike.
inline void store_row(float* y, const float* x, float m, float s, const float* w, const float* b,
                      int C) {
#pragma omp simd
  for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * w[c] + b[c];
}

// The same values rounded to bf16 as they are stored. With AVX-512 by hand, 16 at a time,
// through bf16_row_store.h (the conversion instruction, one NaN/denormal test per row): the
// compiler's version of the integer rounding narrows 32 to 16 bits with vpmovdw, slow on Zen.
// The sum is written as the fp32 loop above contracts it (one fma for * w + b), which the
// bitwise tests hold it to.
inline void store_row(bf16* y, const float* x, float m, float s, const float* w, const float* b,
                      int C) {
#if defined(__AVX512F__)
  const __m512 mv = _mm512_set1_ps(m), sv = _mm512_set1_ps(s);
  auto value = [&](int c, __mmask16 k) {
    const __m512 xv = _mm512_maskz_loadu_ps(k, x + c);
    return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(xv, mv), sv),
                           _mm512_maskz_loadu_ps(k, w + c), _mm512_maskz_loadu_ps(k, b + c));
  };
  bf16_rows::store_row_bf16(y, C, value, value);
#else
#pragma omp simd
  for (int c = 0; c < C; c++) {
    const uint32_t u = std::bit_cast<uint32_t>((x[c] - m) * s * w[c] + b[c]);
    const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    y[c] = (u & 0x7FFFFFFFu) > 0x7F800000u ? bf16(0x7FC0) : bf16(r);
  }
#endif
}

// out (N, C) = layernorm(x) with the statistics saved; with res, x += res first, row by row
// (the block's residual add, whose sum the norm reads while it is in L1).
template <class Out>
void forward_rows(Out* out, float* mean, float* rstd, float* x_sum, const float* inp,
                  const float* res, const float* weight, const float* bias, int N, int C) {
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
    const auto [m, s] = row_stats(x, C);
    store_row(out + row, x, m, s, weight, bias, C);
    mean[n] = m;
    rstd[n] = s;
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 8.0 * N * C);
  forward_rows(out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C);
}

void layernorm_forward_bf16(bf16* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 6.0 * N * C);
  forward_rows(out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C);
}

void add_layernorm_forward(float* out, float* mean, float* rstd, float* x, const float* res,
                           const float* weight, const float* bias, int N, int C) {
  // x and res read, x and out written.
  PhaseScope phase_scope(Phase::norm, 0, 16.0 * N * C);
  forward_rows(out, mean, rstd, x, x, res, weight, bias, N, C);
}

void add_layernorm_forward_bf16(bf16* out, float* mean, float* rstd, float* x, const float* res,
                                const float* weight, const float* bias, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 14.0 * N * C);
  forward_rows(out, mean, rstd, x, x, res, weight, bias, N, C);
}

void residual_add(float* x, const float* res, size_t n) {
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * double(n));
  add_inplace(x, res, n);
}

namespace {
// out (n) = the bf16 rounding of row (n), bitwise to_bf16's (float_to_bf16's rule).
inline void round_row_bf16(bf16* out, const float* row, int n) {
#if defined(__AVX512F__)
  auto value = [&](int c, __mmask16 m) { return _mm512_maskz_loadu_ps(m, row + c); };
  bf16_rows::store_row_bf16(out, n, value, value);
#else
  for (int c = 0; c < n; c++) out[c] = float_to_bf16(row[c]);
#endif
}

// dx (N, C) = base + d/dinp: base is dx itself (accumulate) or the residual path's gradient,
// or with kZeroBase a literal 0 (base unread). One body for all, so the fused residual form
// rounds exactly as a copy followed by +=, and the zero base as a memset followed by +=
// (0 + g is g but for a negative zero's sign, which the add keeps as it always did).
// With dinp16, each dx row is also rounded to bf16 (to_bf16's rule) while it is in L1.
template <bool kZeroBase>
void layernorm_backward_rows(float* dinp, const float* base, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int N,
                             int C, bf16* dinp16 = nullptr) {
  // dinp = base + rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;
    const float* dy = dout + static_cast<size_t>(n) * C;
    const float* b = kZeroBase ? nullptr : base + static_cast<size_t>(n) * C;
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
      dx[c] = (kZeroBase ? 0.0f : b[c]) + (dy[c] * weight[c] - mean_g - xhat * mean_gx) * s;
    }
    if (dinp16) round_row_bf16(dinp16 + static_cast<size_t>(n) * C, dx, C);
  }
}
}  // namespace

void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                              const float* mean, const float* rstd, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * N * C);
  layernorm_backward_rows<false>(dinp, dinp, dout, inp, weight, mean, rstd, N, C);
}

void layernorm_backward_input_overwrite(float* dinp, const float* dout, const float* inp,
                                        const float* weight, const float* mean, const float* rstd,
                                        int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * N * C);  // dout and x read, dx written
  layernorm_backward_rows<true>(dinp, nullptr, dout, inp, weight, mean, rstd, N, C);
}

void layernorm_backward_input_residual(float* dinp, const float* dres, const float* dout,
                                       const float* inp, const float* weight, const float* mean,
                                       const float* rstd, int N, int C) {
  // The bytes of layernorm_backward_input's: dres is read where dinp was.
  PhaseScope phase_scope(Phase::norm, 0, 12.0 * N * C);
  layernorm_backward_rows<false>(dinp, dres, dout, inp, weight, mean, rstd, N, C);
}

void layernorm_backward_input_residual_bf16(float* dinp, bf16* dinp16, const float* dres,
                                            const float* dout, const float* inp,
                                            const float* weight, const float* mean,
                                            const float* rstd, int N, int C) {
  // layernorm_backward_input_residual's bytes and the bf16 copy's 2 a value.
  PhaseScope phase_scope(Phase::norm, 0, 14.0 * N * C);
  layernorm_backward_rows<false>(dinp, dres, dout, inp, weight, mean, rstd, N, C, dinp16);
}

namespace {
// Columns [c0, c1) of the weight gradients, summed over all rows in order: each thread owns a
// contiguous range of columns and reads its part of every row front to back (a stream the
// prefetcher follows), where 64-column blocks walked down the rows read a strided few cache
// lines per row (the bias gradient's layout, bias_grad.cpp). Per column the same sums in the
// same order as before, so the same bits.
constexpr int kWeightChunk = 1024;  // 8 KB of sums beside the streamed rows

void weight_grad_chunk(float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* mean, const float* rstd, int N, int C, int c0, int c1) {
  float dw[kWeightChunk] = {}, db[kWeightChunk] = {};
  const int w = c1 - c0;
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C + c0;
    const float* dy = dout + static_cast<size_t>(n) * C + c0;
    const float m = mean[n], s = rstd[n];
#pragma omp simd
    for (int c = 0; c < w; c++) {
      dw[c] = mul_add(dy[c], (x[c] - m) * s, dw[c]);
      db[c] += dy[c];
    }
  }
  for (int c = 0; c < w; c++) {
    dweight[c0 + c] += dw[c];
    dbias[c0 + c] += db[c];
  }
}
}  // namespace

void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int N, int C) {
  PhaseScope phase_scope(Phase::norm, 0, 8.0 * N * C);
  // dweight, dbias are (C). Threads own column ranges (multiples of 16: no shared cache line)
  // and walk all rows: no shared writes, and the result does not depend on the thread count.
  for_each_column_chunk(C, kWeightChunk, [&](int c0, int c1) {
    weight_grad_chunk(dweight, dbias, dout, inp, mean, rstd, N, C, c0, c1);
  });
}

}  // namespace mt
