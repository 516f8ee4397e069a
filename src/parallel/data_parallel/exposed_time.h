// Time the compute thread spends blocked on data-parallel communication: the part of it
// that did not overlap compute. The pieces of DataParallel (bucketed reduction, ZeRO-3
// gathers, expert ranges) add to one counter, which the step's metrics read and reset.
#pragma once

#include "comm/communicator.h"
#include "core/timer.h"

namespace mt {

class ExposedTime {
 public:
  // Waits for w; only a wait that actually blocks counts.
  void wait(Work w) {
    if (w.test()) return;
    const double t0 = now_seconds();
    w.wait();
    seconds_ += now_seconds() - t0;
  }
  void add(double seconds) { seconds_ += seconds; }
  // Seconds since the last call.
  double take() {
    const double s = seconds_;
    seconds_ = 0;
    return s;
  }

 private:
  double seconds_ = 0;
};

}  // namespace mt
