// Where a stage starts each local chunk's data-parallel gradient sync in its execution order
// (the simulator places the sync's passes and collective there: schedule_simulator.h,
// GradSync). A chunk's gradients are complete after its last gradient computation on the
// stage (its last B, or its last W when the backward is split); the sync starts `delay`
// gradient computations later, as Megatron-Core's delayed grad reduce does (schedules.py at
// f2e5db402c: stage r starts chunk c's sync after its backward r microbatches past c's
// last, so that it runs in the cooldown's idle time), and after the stage's whole list when
// no such computation remains (the "remaining grad reductions" each stage launches after
// its cooldown; a large delay puts every chunk there).
#pragma once

#include <vector>

#include "schedule/execution_order.h"
#include "schedule/schedule.h"

namespace mt {

struct GradSyncPoints {
  // after_step[i]: the chunks whose sync starts right after step i of the stage's execution
  // order (before the transfers that follow it); at_end: those after the whole list.
  std::vector<std::vector<int>> after_step;
  std::vector<int> at_end;
  // own_last[i]: step i is the last gradient computation of the chunks it starts (delay 0).
  std::vector<bool> own_last;
};

// `steps` is execution_order(s, stage).
GradSyncPoints grad_sync_points(const Schedule& s, int stage, const std::vector<ExecStep>& steps,
                                int delay);

}  // namespace mt
