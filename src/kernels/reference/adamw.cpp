#include <cmath>

#include "kernels/reference/reference.h"

namespace mt::ref {

// Transcribes torch/optim/adamw.py (_single_tensor_adamw, 1.13) statement by statement:
// Python floats are doubles, each tensor op rounds to float with the scalar cast to float.
[[gnu::optimize("fp-contract=off")]] void adamw_update(float* param, const float* grad, float* m,
                                                       float* v, size_t n, const AdamWParams& hp) {
  double step = hp.step;
  double bias_correction1 = 1 - std::pow(hp.beta1, step);
  double bias_correction2 = 1 - std::pow(hp.beta2, step);
  double step_size = hp.lr / bias_correction1;
  double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (size_t i = 0; i < n; i++) {
    param[i] = param[i] * static_cast<float>(1 - hp.lr * hp.weight_decay);  // param.mul_
    float ea = m[i] * static_cast<float>(hp.beta1);                         // exp_avg.mul_
    ea = __builtin_fmaf(grad[i], static_cast<float>(1 - hp.beta1), ea);     // .add_(g, alpha)
    float es = v[i] * static_cast<float>(hp.beta2);                         // exp_avg_sq.mul_
    float gv = static_cast<float>(1 - hp.beta2) * grad[i];                  // .addcmul_(g, g,
    es = __builtin_fmaf(gv, grad[i], es);                                   //   value)
    float denom = __builtin_sqrtf(es) / static_cast<float>(bias_correction2_sqrt);  // sqrt() / bc2
    denom = denom + static_cast<float>(hp.eps);                                     // .add_(eps)
    float upd = static_cast<float>(-step_size) * ea;  // addcdiv_ value*t1
    param[i] = param[i] + upd / denom;                //   / t2 + self
    m[i] = ea;
    v[i] = es;
  }
}

}  // namespace mt::ref
