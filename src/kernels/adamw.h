// AdamW step, bit-for-bit the arithmetic of torch.optim.AdamW (PyTorch 1.13, single-tensor
// path, CPU, float tensors):
//   p *= float(1 - lr*wd);  m = fma(g, float(1-b1), m*float(b1));
//   v = v*float(b2) + float(1-b2)*g*g;
//   p += (float(-lr/bc1) * m) / (sqrt(v) / float(sqrt(bc2)) + float(eps))
// with bc1 = 1 - b1^t, bc2 = 1 - b2^t. The scalar expressions are evaluated in double, as
// Python does with its floats, and rounded to float where torch casts the scalar to the
// tensor's dtype; that is why the hyperparameters are doubles (0.9f would give different bits).
#pragma once

#include <cstddef>
#include <span>

#include "kernels/bf16.h"

namespace mt {

struct AdamWParams {
  double lr, beta1, beta2, eps, weight_decay;
  int step;  // 1-based update count (bias correction)
  // The gradient-clipping coefficient, applied as the gradient is read: g = float(g * s)
  // before anything else, the bits torch's clip_grad_norm_ (an in-place multiply) leaves in
  // the gradient. Fused here because a separate pass over the gradients costs a read and a
  // write of all of them; 1 leaves every gradient as it is (x * 1 is x).
  float grad_scale = 1.0f;
};

// Returns whether every updated param, m and v element is finite (no inf, no NaN). The
// check rides on the update's own stores (their exponent bits), so the trainer's guard
// against a poisoned update (train/step.cpp) costs no second pass over the state.
bool adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWParams& hp);

// One run of n elements for adamw_update_pieces: its parameters, gradients, moments, and
// whether hp.weight_decay applies to it (else 0). copy (n values, may be null): the update
// also writes to_bf16 of the updated parameters there, bit for bit, from the values it
// stores (--precision bf16's weight copies, kernels/bf16_weight.h), so the copies need no
// pass of their own over the fp32 weights.
struct AdamWPiece {
  float* param;
  const float* grad;
  float* m;
  float* v;
  bf16* copy;
  size_t n;
  bool decay;
};

// adamw_update over every piece in one pass: one OpenMP team shares the pieces laid end to
// end, instead of a team per piece (a model's biases and norms are pieces of a few hundred
// elements). Bit for bit adamw_update of each piece in turn, at any thread count.
bool adamw_update_pieces(std::span<const AdamWPiece> pieces, const AdamWParams& hp);

}  // namespace mt
