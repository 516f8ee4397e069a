#include "train/optimizer.h"

#include <algorithm>

#include "kernels/adamw.h"

namespace mt {

AdamW::AdamW(const ParamTable& table, const AdamWConfig& cfg, size_t begin, size_t end)
    : table_(table), cfg_(cfg), begin_(begin), end_(end), m_(end - begin), v_(end - begin) {}

void AdamW::update(float* params, const float* grads, double lr, int step) {
  for (const ParamInfo& p : table_.entries()) {
    const size_t lo = std::max(p.offset, begin_), hi = std::min(p.offset + p.numel, end_);
    if (lo >= hi) continue;
    AdamWParams hp{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, p.decay() ? cfg_.weight_decay : 0.0, step};
    adamw_update(params + lo, grads + lo, m_.data() + (lo - begin_), v_.data() + (lo - begin_),
                 hi - lo, hp);
  }
}

}  // namespace mt
