// Where the overlapped MoE layer accumulates its routed experts' weight gradients in B, under
// its last backward combine, instead of in W (model/moe_layer.h,
// ExpertParallelShard::expert_grads_in_b): one rule for the trainer that sets it
// (train/session.cpp) and the planner that prices it (plan/local_costs.cpp).
#pragma once

#include "train/options.h"

namespace mt {

// Only where the gradients stay bound through B (ZeRO 0-1; at 2-3 the dp reducer binds a
// pooled bucket only before W) and W follows B at once (not the schedules that defer W into
// bubbles: zb-h1, DualPipe-V). Takes effect only with --moe-overlap-parts > 1.
inline bool expert_grads_in_b(const ParallelOptions& p) {
  return p.zero < 2 && p.schedule != ScheduleKind::zb_h1 && p.schedule != ScheduleKind::dualpipev;
}

}  // namespace mt
