#include "comm/hybrid/sleeping_wait.h"

#include <thread>

#include "core/timer.h"

namespace mt::hybrid {

void wait_sleeping(Work& w, const SleepingWait& how) {
  const auto now = [&how] { return how.clock ? how.clock() : now_seconds(); };
  const double start = now();
  for (int i = 0; i < how.spin_polls; ++i)
    if (w.test()) return;
  for (;;) {
    if (how.sleep)
      how.sleep(how.quantum);
    else
      std::this_thread::sleep_for(how.quantum);
    if (w.test()) return;
    // Past the timeout: one last wait that fails at once unless the work just completed,
    // with this loop's time counted.
    const double waited = now() - start;
    if (waited >= how.timeout_s) return w.wait_after(waited);
  }
}

void wait_sleeping(Work&& w, const SleepingWait& how) {
  wait_sleeping(w, how);
}

}  // namespace mt::hybrid
