#include "train/optimizer.h"

#include "kernels/adamw.h"

namespace mt {

AdamW::AdamW(const AdamWConfig& cfg, std::vector<OptimPiece> pieces)
    : cfg_(cfg), pieces_(std::move(pieces)) {
  size_t total = 0;
  for (const OptimPiece& p : pieces_) {
    moment_off_.push_back(total);
    total += p.n;
  }
  m_.resize(total);
  v_.resize(total);
}

bool AdamW::update(float* params, const float* grads, double lr, int step, float grad_scale) {
  bool finite = true;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const OptimPiece& p = pieces_[i];
    AdamWParams hp{lr,   cfg_.beta1, cfg_.beta2, cfg_.eps, p.decay ? cfg_.weight_decay : 0.0,
                   step, grad_scale};
    // Every piece is updated even after a non-finite one: the ranks agree on stopping
    // afterwards, and no rank's state is read again once one reports a poisoned update.
    finite &= adamw_update(params + p.param_off, grads + p.grad_off, m_.data() + moment_off_[i],
                           v_.data() + moment_off_[i], p.n, hp);
  }
  return finite;
}

}  // namespace mt
