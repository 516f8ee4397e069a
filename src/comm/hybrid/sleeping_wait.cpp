#include "comm/hybrid/sleeping_wait.h"

#include <thread>

namespace mt::hybrid {

void wait_sleeping(Work& w, const SleepingWait& how) {
  for (int i = 0; i < how.spin_polls; ++i)
    if (w.test()) return;
  for (int i = 0; i < how.max_sleeps; ++i) {
    if (how.sleep)
      how.sleep(how.quantum);
    else
      std::this_thread::sleep_for(how.quantum);
    if (w.test()) return;
  }
  w.wait();
}

void wait_sleeping(Work&& w, const SleepingWait& how) {
  wait_sleeping(w, how);
}

}  // namespace mt::hybrid
