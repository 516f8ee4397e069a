// Which global elements a run of a rank's local elements holds, as index runs.
//
// A rank's piece of a tensor (ParamInfo: tp blocks, ZeRO chunk, padding rows) maps to the
// global tensor through its shard spec. A sharded checkpoint stores each piece as it lies
// in the rank's memory and records the global indices it covers; a load maps its own
// pieces the same way and asks the checkpoint for those global indices. Both sides
// describe the indices as strided runs: `count` intervals of `len` elements, `stride`
// apart, so a row-parallel slice of a [C, 4C] matrix is one run, not C of them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/param_table.h"

namespace mt {

struct StridedRun {
  int64_t start = 0, len = 0, count = 1, stride = 0;
  int64_t elements() const { return len * count; }
};

// Calls fn(local_index, global_index, len) for each maximal stretch of local elements
// [lo, hi) of `p` (local indices, 0..p.numel) whose global indices are consecutive, in
// local order. Padding rows (beyond the global extent) are skipped.
void map_local_range(const ParamInfo& p, size_t lo, size_t hi,
                     const std::function<void(size_t, int64_t, int64_t)>& fn);

// Builds strided runs from intervals added in order: consecutive intervals merge,
// intervals of one length at one distance fold into a run's count.
class RunBuilder {
 public:
  void add(int64_t start, int64_t len);
  const std::vector<StridedRun>& runs() const { return runs_; }
  int64_t elements() const { return elements_; }

 private:
  std::vector<StridedRun> runs_;
  int64_t elements_ = 0;
};

// Calls fn(start, len) for every interval of the runs, in order.
void for_each_interval(const std::vector<StridedRun>& runs,
                       const std::function<void(int64_t, int64_t)>& fn);

}  // namespace mt
