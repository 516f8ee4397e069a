// A linear layer's tensors resolved to pointers in the parameter / gradient arenas.
// forward, backward_input (B) and backward_weight (W) are separately callable so a
// zero-bubble schedule can defer W.
#pragma once

#include "kernels/matmul.h"
#include "model/param_table.h"

namespace mt {

struct Linear {
  const ParamInfo* weight_info = nullptr;
  const ParamInfo* bias_info = nullptr;  // null when the layer has no bias
  int in = 0, out = 0;                   // local (possibly sharded) sizes
  const float* w = nullptr;
  const float* b = nullptr;
  float* dw = nullptr;
  float* db = nullptr;

  void bind(float* params, float* grads) {
    w = params + weight_info->offset;
    dw = grads + weight_info->offset;
    if (bias_info) {
      b = params + bias_info->offset;
      db = grads + bias_info->offset;
    }
  }
  // out (N, out) = inp (N, in) @ w^T + b (bias skipped when with_bias is false)
  void forward(float* y, const float* x, int N, bool with_bias = true) const {
    matmul_forward(y, x, w, with_bias ? b : nullptr, N, in, out);
  }
  // dx (N, in) += dy (N, out) @ w
  void backward_input(float* dx, const float* dy, int N) const {
    matmul_backward_input(dx, dy, w, N, in, out);
  }
  // dw += dy^T @ x; db += sum dy
  void backward_weight(const float* dy, const float* x, int N, bool with_bias = true) const {
    matmul_backward_weight(dw, with_bias ? db : nullptr, dy, x, N, in, out);
  }
};

}  // namespace mt
