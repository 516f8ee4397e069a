#include "train/optimizer.h"

#include <algorithm>

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
  split_runs({});
}

bool AdamW::update(float* params, const float* grads, double lr, int step, float grad_scale) {
  kernel_runs_.clear();
  for (const Run& r : runs_) {
    const OptimPiece& p = pieces_[r.piece];
    const size_t moment = moment_off_[r.piece] + r.offset;
    kernel_runs_.push_back({params + p.param_off + r.offset, grads + p.grad_off + r.offset,
                            m_.data() + moment, v_.data() + moment, r.copy, r.n, p.decay});
  }
  // Every piece is updated even after a non-finite one: the ranks agree on stopping
  // afterwards, and no rank's state is read again once one reports a poisoned update.
  const AdamWParams hp{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, step, grad_scale};
  return adamw_update_pieces(kernel_runs_, hp);
}

std::vector<bool> AdamW::write_bf16_copies(const std::vector<Bf16CopyRange>& ranges, bool partial) {
  // Phase 1: a range is taken when the pieces cover each of its elements (with `partial`:
  // any of them) and no range taken before overlaps it.
  std::vector<bool> taken(ranges.size());
  std::vector<Bf16CopyRange> kept;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const Bf16CopyRange& r = ranges[i];
    size_t covered = 0;
    for (const OptimPiece& p : pieces_) {
      const size_t lo = std::max(p.param_off, r.param_off);
      const size_t hi = std::min(p.param_off + p.n, r.param_off + r.n);
      covered += hi > lo ? hi - lo : 0;
    }
    // Two copies of the same weights (none today) would need two stores per element.
    const bool overlaps = std::any_of(kept.begin(), kept.end(), [&](const Bf16CopyRange& k) {
      return k.param_off < r.param_off + r.n && r.param_off < k.param_off + k.n;
    });
    taken[i] = r.n > 0 && (partial ? covered > 0 : covered == r.n) && !overlaps;
    if (taken[i]) kept.push_back(r);
  }
  // Phase 2: the runs, split at the taken ranges' ends.
  split_runs(kept);
  return taken;
}

std::vector<std::pair<size_t, size_t>> AdamW::uncovered(size_t param_off, size_t n) const {
  // The pieces' parts inside the range, in order of their offsets, then the gaps between.
  std::vector<std::pair<size_t, size_t>> inside, gaps;
  for (const OptimPiece& p : pieces_) {
    const size_t lo = std::max(p.param_off, param_off);
    const size_t hi = std::min(p.param_off + p.n, param_off + n);
    if (hi > lo) inside.emplace_back(lo, hi);
  }
  std::sort(inside.begin(), inside.end());
  size_t at = param_off;
  for (const auto& [lo, hi] : inside) {
    if (lo > at) gaps.emplace_back(at, lo);
    at = std::max(at, hi);
  }
  if (at < param_off + n) gaps.emplace_back(at, param_off + n);
  return gaps;
}

void AdamW::split_runs(const std::vector<Bf16CopyRange>& taken) {
  std::vector<Bf16CopyRange> sorted = taken;
  std::sort(sorted.begin(), sorted.end(), [](const Bf16CopyRange& a, const Bf16CopyRange& b) {
    return a.param_off < b.param_off;
  });
  runs_.clear();
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const size_t begin = pieces_[i].param_off, end = begin + pieces_[i].n;
    size_t at = begin;  // the first element of the piece not yet in a run
    for (const Bf16CopyRange& r : sorted) {
      const size_t lo = std::max(at, r.param_off), hi = std::min(end, r.param_off + r.n);
      if (hi <= lo) continue;
      if (lo > at) runs_.push_back({i, at - begin, lo - at, nullptr});
      runs_.push_back({i, lo - begin, hi - lo, r.copy + (lo - r.param_off)});
      at = hi;
    }
    if (at < end) runs_.push_back({i, at - begin, end - at, nullptr});
  }
  kernel_runs_.reserve(runs_.size());
}

}  // namespace mt
