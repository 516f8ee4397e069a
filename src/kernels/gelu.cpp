#include "kernels/gelu.h"

#include "kernels/vec_math.h"

namespace mt {

// 0.5 (1 + tanh(u)) equals sigmoid(2u), so gelu(x) = x / (1 + exp(-2u)): one exp, no
// cancellation for small u (1 - 2/(e^2u + 1) loses all digits there), and it vectorises.
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

inline float gelu_one(float x) {
  float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return x / (1.0f + exp_vec(-2.0f * u));
}

inline float gelu_grad(float x) {
  float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  float s = 1.0f / (1.0f + exp_vec(-2.0f * u));
  float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
  return s + 2.0f * x * s * (1.0f - s) * du;
}
}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) {
  long long count = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < count; i++) out[i] = gelu_one(inp[i]);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  // d/dx = s + x s (1 - s) * 2 u'(x) with s = sigmoid(2u), using 1 - tanh^2 = 4 s (1 - s).
  // Two loops rather than a select on dinp == dout, which GCC will not vectorise.
  long long count = static_cast<long long>(n);
  if (dinp == dout) {
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < count; i++) dinp[i] = gelu_grad(inp[i]) * dout[i];
  } else {
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < count; i++) dinp[i] += gelu_grad(inp[i]) * dout[i];
  }
}

void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int OC) {
  // pre, out are (N, OC); bias is (OC).
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    float* p = pre + static_cast<size_t>(r) * OC;
    float* o = out + static_cast<size_t>(r) * OC;
#pragma omp simd
    for (int c = 0; c < OC; c++) {
      float v = p[c] + bias[c];
      p[c] = v;
      o[c] = gelu_one(v);
    }
  }
}

}  // namespace mt
