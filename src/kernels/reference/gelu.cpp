#include <cmath>
#include <cstddef>

#include "kernels/reference/reference.h"

namespace mt::ref {

namespace {
const double kSqrt2OverPi = std::sqrt(2.0 / M_PI);

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

double gelu_grad(double x) {
  double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
}
}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = static_cast<float>(gelu(inp[i]));
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  bool overwrite = dinp == dout;
  for (size_t i = 0; i < n; i++) {
    double g = gelu_grad(inp[i]) * dout[i];
    dinp[i] = static_cast<float>(overwrite ? g : dinp[i] + g);
  }
}

void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int OC) {
  for (int r = 0; r < N; r++) {
    for (int c = 0; c < OC; c++) {
      float& p = pre[static_cast<size_t>(r) * OC + c];
      p += bias[c];
      out[static_cast<size_t>(r) * OC + c] = static_cast<float>(gelu(p));
    }
  }
}

}  // namespace mt::ref
