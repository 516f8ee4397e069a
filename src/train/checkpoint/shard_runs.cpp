#include "train/checkpoint/shard_runs.h"

#include <algorithm>

namespace mt {

void map_local_range(const ParamInfo& p, size_t lo, size_t hi,
                     const std::function<void(size_t, int64_t, int64_t)>& fn) {
  hi = std::min(hi, p.numel);
  if (lo >= hi) return;
  if (p.shard.replicated()) {
    fn(lo, int64_t(lo), int64_t(hi - lo));
    return;
  }
  // As ParamInfo::for_each_element: both shapes viewed as (outer, dim, inner). One block
  // of one outer index is a contiguous stretch locally and globally (its padding rows, if
  // any, come last), so the walk costs outer x blocks steps, not one per element.
  const int d = p.shard.dim;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= p.global_shape[size_t(i)];
  for (size_t i = size_t(d) + 1; i < p.global_shape.size(); ++i) inner *= p.global_shape[i];
  const int64_t gdim = p.global_shape[size_t(d)], ldim = p.local_shape[size_t(d)];
  const int64_t first_o = int64_t(lo) / (ldim * inner);
  for (int64_t o = first_o; o < outer; ++o) {
    int64_t lrow = 0;
    for (const ShardSpec::Block& b : p.shard.blocks) {
      const int64_t real = std::max<int64_t>(0, std::min(b.len, gdim - b.start));
      const int64_t ls = (o * ldim + lrow) * inner;
      lrow += b.len;
      const int64_t a = std::max<int64_t>(ls, int64_t(lo));
      const int64_t e = std::min<int64_t>(ls + real * inner, int64_t(hi));
      if (ls >= int64_t(hi)) return;
      if (a >= e) continue;
      fn(size_t(a), (o * gdim + b.start) * inner + (a - ls), e - a);
    }
  }
}

void RunBuilder::add(int64_t start, int64_t len) {
  if (len <= 0) return;
  elements_ += len;
  if (!runs_.empty()) {
    StridedRun& r = runs_.back();
    if (r.count == 1 && r.start + r.len == start) {
      r.len += len;
      return;
    }
    if (r.len == len && start > r.start) {
      if (r.count == 1 && start - r.start >= len) {
        r.stride = start - r.start;
        r.count = 2;
        return;
      }
      if (r.count > 1 && start == r.start + r.count * r.stride) {
        ++r.count;
        return;
      }
    }
  }
  runs_.push_back({start, len, 1, 0});
}

void for_each_interval(const std::vector<StridedRun>& runs,
                       const std::function<void(int64_t, int64_t)>& fn) {
  for (const StridedRun& r : runs)
    for (int64_t k = 0; k < r.count; ++k) fn(r.start + k * r.stride, r.len);
}

}  // namespace mt
