// AdamW over a contiguous range [begin, end) of the flat parameter arena (CONTRACTS.md §2).
// One worker owns the whole arena; under ZeRO each data-parallel rank owns one shard of it
// and keeps moments only for that shard. The parameter table decides, per tensor, whether
// weight decay applies; alignment gaps between tensors are skipped.
#pragma once

#include <cstddef>

#include "core/arena.h"
#include "model/param_table.h"

namespace mt {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(const ParamTable& table, const AdamWConfig& cfg, size_t begin, size_t end);
  // One update with learning rate lr; `step` is the 1-based update count.
  // params and grads point at the start of the full arenas (same offsets as the table).
  void update(float* params, const float* grads, double lr, int step);

  Arena& exp_avg() { return m_; }
  Arena& exp_avg_sq() { return v_; }
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  size_t state_bytes() const { return m_.bytes() + v_.bytes(); }

 private:
  const ParamTable& table_;
  AdamWConfig cfg_;
  size_t begin_, end_;
  Arena m_, v_;  // moments of [begin, end)
};

}  // namespace mt
