#include "kernels/swiglu.h"
#include "kernels/phase_profile.h"

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
#pragma omp simd
  for (int i = 0; i < F; i++) out[i] = float_to_bf16_select(gate[i] * sigmoid(gate[i]) * up[i]);
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
#pragma omp simd
  for (int i = 0; i < F; i++) {
    const float s = sigmoid(gate[i]);
    dgate[i] = float_to_bf16_select(dout[i] * up[i] * (s + gate[i] * s * (1.0f - s)));
    dup[i] = float_to_bf16_select(dout[i] * (gate[i] * s));
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
