// tanh-approximated GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include <cstddef>

namespace mt {

// out (n) = gelu(inp (n)). out may alias inp only if the caller keeps no need for inp.
void gelu_forward(float* out, const float* inp, size_t n);

// dinp (n) += gelu'(inp) * dout.  dinp may alias dout (then it is overwritten, not accumulated).
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

// Fused: pre (N, OC) += bias (OC) broadcast over rows, then out = gelu(pre). Keeps pre for
// backward.
void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int OC);

}  // namespace mt
