// Local, more rank threads than cores: how many times per step a rank blocks and must be
// woken. There the local backend's waiter does not spin (comm/local/doorbell.h): it yields
// 32 times, then sleeps on its doorbell until the peer's send rings it. While the other
// rank of its core has work the yields hand it the core and the waiter seldom sleeps; it
// sleeps when its core has nothing else to run, and its wake-up costs the wall the wake
// probe measures (plan/wake_probe.cpp, oversubscribed_wake_s). Ranks that compute the same
// work in step (tp, cp and dp peers of one stage) meet at their collectives within the
// yields; what sleeps is a wait for a rank that is elsewhere in the schedule. The count
// comes from the schedule:
//  - the pipeline's receives that the shared-cores replay reaches before their message is
//    sent (shared_cores_makespan's `blocked`), the mean over stages: every rank of the
//    stage blocks on its own;
//  - with tp or cp > 1, one more per such receive: the stage's ranks are woken one by one,
//    each when its own sender's send runs and its core frees, so the first collective among
//    them after the wake waits for the one woken last;
//  - with pp > 1, the step's world all-reduces (the loss and the gradient norm): the stages
//    reach them apart (the first stage finishes the pipeline last), so the ranks of every
//    stage but the last to arrive sleep there, (pp - 1) / pp of the ranks.
#pragma once

#include <vector>

#include "plan/layout.h"

namespace mt::plan {

double blocking_waits_per_rank(const Layout& l, const std::vector<int>& blocked_receives,
                               double world_all_reduces);

}  // namespace mt::plan
