// AdamW step, bit-for-bit the arithmetic order of torch.optim.AdamW (PyTorch 1.13,
// single-tensor path): p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
// p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps).
#pragma once

#include <cstddef>

namespace mt {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  int step;  // 1-based update count (bias correction)
};

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWParams& hp);

}  // namespace mt
