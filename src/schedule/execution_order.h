// The order in which a stage runs its action list: the list's own order, except around an
// FB (an overlapped forward-backward pair, schedule.h). Its F half runs first and the F
// half's SEND_ACT, listed after the FB, leaves right after it; the B half's RECV_GRAD,
// listed before the FB, is waited for only then, just before the B half. So the F half's
// output travels while the B half computes, and the B half's input while the F half
// computes. The simulator times this order and the executor runs it; the validator checks
// the list (every move keeps a receive before the half that consumes it and a send after
// the half that produces it, so the list's dependencies still hold).
//
// On this CPU engine the two halves compute one after the other on the rank's threads:
// what overlaps is one half's communication with the other half's compute, not the two
// computations (OpCosts::fb_overlap models engines where they do).
#pragma once

#include <vector>

#include "schedule/schedule.h"

namespace mt {

enum class Half { whole, forward, backward };

struct ExecStep {
  int index = 0;  // into schedule.actions[stage]
  Half half = Half::whole;
  // A transfer moved inside an FB (its F half's send, its B half's receive).
  bool inside_fb = false;
};

std::vector<ExecStep> execution_order(const Schedule& s, int stage);

}  // namespace mt
