#include "kernels/swiglu.h"

#include "kernels/vec_math.h"

namespace mt {

namespace {

// sigmoid through exp_vec (libm's expf is a scalar call that would not vectorise).
inline float sigmoid(float g) {
  return 1.0f / (1.0f + exp_vec(-g));
}

}  // namespace

void swiglu_forward(float* out, const float* gate, const float* up, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

void swiglu_forward_bf16(bf16* out, const float* gate, const float* up, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = float_to_bf16_select(gate[i] * sigmoid(gate[i]) * up[i]);
}

namespace {

// silu'(g) = s + g s (1 - s), s = sigmoid(g). dout is read before dgate is written, so
// dgate may alias it (kOverwrite).
template <bool kOverwrite>
void swiglu_backward_impl(float* dgate, float* dup, const float* gate, const float* up,
                          const float* dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const float g = gate[i], s = sigmoid(g), d = dout[i];
    const float dg = d * up[i] * (s + g * s * (1.0f - s));
    dup[i] += d * (g * s);
    dgate[i] = dg + (kOverwrite ? 0.0f : dgate[i]);
  }
}

}  // namespace

void swiglu_backward(float* dgate, float* dup, const float* gate, const float* up,
                     const float* dout, size_t n) {
  if (dgate == dout)
    swiglu_backward_impl<true>(dgate, dup, gate, up, dout, n);
  else
    swiglu_backward_impl<false>(dgate, dup, gate, up, dout, n);
}

void swiglu_backward_bf16(bf16* dgate, bf16* dup, const float* gate, const float* up,
                          const float* dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const float g = gate[i], s = sigmoid(g), d = dout[i];
    dgate[i] = float_to_bf16_select(d * up[i] * (s + g * s * (1.0f - s)));
    dup[i] = float_to_bf16_select(d * (g * s));
  }
}

}  // namespace mt
