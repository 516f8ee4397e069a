// Bounds of a candidate's memory per rank, in long double, so that the engine's estimate
// (train/memory_estimate.h, 64-bit integer arithmetic) is only asked where none of its sums
// can wrap. A `--seq 2000000000` or `--dim 2000000000` once came back from it as a negative
// footprint that "fitted"; now:
//   upper: at least every byte count the estimate computes for the layout (its slots taken
//          from the schedule, no recomputation saving assumed, generous coefficients). Below
//          kMaxEstimateBytes the estimate is exact and safe, and is what the planner uses.
//   lower: a few parts the estimate always counts (the largest stage's parameters, gradients
//          and AdamW moments, the residual stream x and dx of its blocks for one microbatch,
//          the data loader's tokens). Above the device's capacity the layout does not fit,
//          whatever the estimate would have said.
// Between the two (upper too large, lower small enough) the layout is beyond what the
// planner can count; the search skips it and says how many it skipped.
#pragma once

#include "plan/layout.h"
#include "schedule/schedule.h"

namespace mt::plan {

// 2^60 bytes: eight times below the largest int64, far above any device.
constexpr long double kMaxEstimateBytes = 1152921504606846976.0L;

struct MemoryBounds {
  long double upper = 0;
  // The lower bound and its parts (for the refusal's "what dominates").
  long double params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;
  long double lower() const { return params + grads + optimizer + activations + buffers; }
};

// schedule: the layout's (any Schedule without pp), as planned_memory receives it.
MemoryBounds memory_bounds(const PlanRequest& r, const Layout& l, const Schedule& schedule);
// The lower bound alone (no schedule needed; upper is infinite).
MemoryBounds memory_lower_bound(const PlanRequest& r, const Layout& l);

}  // namespace mt::plan
