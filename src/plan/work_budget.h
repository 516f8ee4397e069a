// The search's bound on its own work, so that any request answers in bounded time: a
// `--layers 2000000000` or a GPU count with thousands of divisors once ran for minutes (or
// ran out of memory) before saying anything. Every piece of work is charged before it is
// done, in units of about one block's worth of cost (a layout enumerated, a block costed or
// estimated, a schedule action simulated, a partition candidate tried); past the limit the
// search stops with a UsageError that says what made it large and which knobs shrink it.
#pragma once

#include <string>
#include <utility>

#include "core/error.h"

namespace mt::plan {

// 1.5-3.5 ns of CPU per unit here (the host loaded), so at most about 35 s. The 175B example of
// docs/planner.md (1024 GPUs, every knob open, 131,760 combinations) needs 2.7e9 (4.3 s), a
// 1T model on 3072 GPUs with every knob open 7.2e9 (15 s).
constexpr double kSearchWorkLimit = 1e10;

class WorkBudget {
 public:
  // context: what the search is over, for the message ("1024 devices, 96 layers, ...").
  explicit WorkBudget(std::string context, double limit = kSearchWorkLimit)
      : context_(std::move(context)), limit_(limit) {}

  void charge(double units) {
    used_ += units;
    if (used_ > limit_)
      throw UsageError(str("the layout search is too large to answer (", context_,
                           "): it needs more than ", limit_,
                           " steps of work; fix more of --tp, --pp, --dp, --micro-batch, "
                           "--schedule, --virtual-stages, or plan fewer --layers"));
  }
  double used() const { return used_; }

 private:
  std::string context_;
  double limit_, used_ = 0;
};

}  // namespace mt::plan
