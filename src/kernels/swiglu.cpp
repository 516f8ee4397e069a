#include "kernels/swiglu.h"
#include "kernels/phase_profile.h"

#include <algorithm>

#include "kernels/bf16_row_store.h"
#include "kernels/vec_math.h"

namespace mt {

namespace {

// sigmoid through exp_vec (libm's expf is a scalar call that would not vectorise).
inline float sigmoid(float g) {
  return 1.0f / (1.0f + exp_vec(-g));
}

// silu'(g) = s + g s (1 - s), s = sigmoid(g): row n's [dgate | dup] as fn(i, dgate, dup).
template <class Store>
void swiglu_backward_rows(const float* gu, const float* dout, int N, int F, Store store) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gu + size_t(n) * 2 * F;
    const float* d = dout + size_t(n) * F;
#pragma omp simd
    for (int i = 0; i < F; i++) {
      const float s = sigmoid(g[i]);
      store(size_t(n) * 2 * F + i, d[i] * g[F + i] * (s + g[i] * s * (1.0f - s)),
            d[i] * (g[i] * s));
    }
  }
}

// The bf16 rows compute kChunk fp32 values with the fp32 kernels' expression (the loop the
// compiler vectorises, so the same bits as swiglu_forward / swiglu_backward) into a buffer
// that stays in L1, then round them with the conversion instruction and one NaN/denormal
// test per chunk (bf16_row_store.h): the compiler's form of float_to_bf16 narrows 32 to 16
// bits with vpmovdw, slow on Zen. A multiple of 16, so only a row's last chunk has a tail.
constexpr int kChunk = 256;

inline void store_chunk_bf16(bf16* out, const float* v, int n) {
#if defined(__AVX512F__)
  auto value = [=](int c, __mmask16 m) { return _mm512_maskz_loadu_ps(m, v + c); };
  bf16_rows::store_row_bf16(out, n, value, value);
#else
  for (int i = 0; i < n; i++) out[i] = float_to_bf16(v[i]);
#endif
}

}  // namespace

void swiglu_forward(float* out, const float* gu, int N, int F) {
  PhaseScope phase_scope(Phase::activation, 0, 12.0 * N * F);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gu + size_t(n) * 2 * F;
    float* o = out + size_t(n) * F;
#pragma omp simd
    for (int i = 0; i < F; i++) o[i] = g[i] * sigmoid(g[i]) * g[F + i];
  }
}

void swiglu_forward_bf16_row(bf16* out, const float* gate, const float* up, int F) {
  alignas(64) float v[kChunk];
  for (int c0 = 0; c0 < F; c0 += kChunk) {
    const int n = std::min(kChunk, F - c0);
    const float *g = gate + c0, *u = up + c0;
#pragma omp simd
    for (int i = 0; i < n; i++) v[i] = g[i] * sigmoid(g[i]) * u[i];
    store_chunk_bf16(out + c0, v, n);
  }
}

void swiglu_forward_bf16(bf16* out, const float* gu, int N, int F) {
  PhaseScope phase_scope(Phase::activation, 0, 10.0 * N * F);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gu + size_t(n) * 2 * F;
    swiglu_forward_bf16_row(out + size_t(n) * F, g, g + F, F);
  }
}

void swiglu_backward(float* dgu, const float* gu, const float* dout, int N, int F,
                     bool accumulate) {
  PhaseScope phase_scope(Phase::activation, 0, 20.0 * N * F);
  if (accumulate)
    swiglu_backward_rows(gu, dout, N, F, [=](size_t at, float dg, float du) {
      dgu[at] += dg;
      dgu[at + F] += du;
    });
  else
    swiglu_backward_rows(gu, dout, N, F, [=](size_t at, float dg, float du) {
      dgu[at] = dg;
      dgu[at + F] = du;
    });
}

void swiglu_backward_bf16_row(bf16* dgate, bf16* dup, const float* gate, const float* up,
                              const float* dout, int F) {
  alignas(64) float vg[kChunk], vu[kChunk];
  for (int c0 = 0; c0 < F; c0 += kChunk) {
    const int n = std::min(kChunk, F - c0);
    const float *g = gate + c0, *u = up + c0, *d = dout + c0;
#pragma omp simd
    for (int i = 0; i < n; i++) {
      const float s = sigmoid(g[i]);
      vg[i] = d[i] * u[i] * (s + g[i] * s * (1.0f - s));
      vu[i] = d[i] * (g[i] * s);
    }
    store_chunk_bf16(dgate + c0, vg, n);
    store_chunk_bf16(dup + c0, vu, n);
  }
}

void swiglu_backward_bf16(bf16* dgu, const float* gu, const float* dout, int N, int F) {
  PhaseScope phase_scope(Phase::activation, 0, 16.0 * N * F);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* g = gu + size_t(n) * 2 * F;
    bf16* d = dgu + size_t(n) * 2 * F;
    swiglu_backward_bf16_row(d, d + F, g, g + F, dout + size_t(n) * F, F);
  }
}

}  // namespace mt
