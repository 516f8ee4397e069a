#include "train/deferred_update.h"

#include "core/error.h"

namespace mt {

DeferredUpdate::DeferredUpdate(DataParallel& dp, AdamW& opt, bool enabled)
    : dp_(dp), opt_(opt), enabled_(enabled) {
  const std::vector<FlatUnit>& units = dp.layout().units();
  for (const FlatUnit& u : units) spans_.push_back({u.lo, u.hi});
  pending_.assign(units.size(), 0);
  // Unit 0 is the edge, units 1.. the blocks. The edge's pieces are told from the blocks'
  // by their table offsets: that needs the blocks back to back (a check, not a rule).
  if (units.size() < 2) enabled_ = false;
  for (size_t u = 2; enabled_ && u < units.size(); ++u)
    if (units[u].lo != units[u - 1].hi) enabled_ = false;
  if (!enabled_) return;
  blocks_ = {units[1].lo, units.back().hi};
  dp_.set_use_hook([this](int unit) { apply(unit); });
}

bool DeferredUpdate::update(double lr, int step, float grad_scale, bool defer) {
  float* p = dp_.param_storage();
  const float* g = dp_.grad_storage();
  if (!enabled_ || !defer) return opt_.update(p, g, lr, step, grad_scale);
  lr_ = lr;
  step_ = step;
  scale_ = grad_scale;
  for (size_t u = 1; u < pending_.size(); ++u) {
    pending_[u] = 1;
    dp_.keep_grads(int(u));
  }
  return opt_.update_part(p, g, lr, step, grad_scale, blocks_, false);
}

bool DeferredUpdate::settled() const {
  for (char p : pending_)
    if (p) return false;
  return true;
}

void DeferredUpdate::apply(int unit) {
  if (!pending_[size_t(unit)]) return;
  pending_[size_t(unit)] = 0;
  const bool finite = opt_.update_part(dp_.param_storage(), dp_.grad_storage(), lr_, step_, scale_,
                                       spans_[size_t(unit)], true);
  dp_.zero_kept_grads(unit);
  if (!finite)
    throw RuntimeError(str("step ", step_,
                           ": non-finite weights after the update (a block's part, applied at "
                           "its first use; try a lower --lr)"));
}

}  // namespace mt
