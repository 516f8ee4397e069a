// How the hybrid world's communicator worker (hierarchical_communicator.h) waits for the
// MPI step of a collective between processes.
//
// Open MPI moves a nonblocking collective's bytes only inside MPI calls (its TCP transport
// has no progress of its own by default), so the worker has to poll. Work::wait polls by
// spinning first, which suits a rank waiting for its own result, but this worker shares the
// cores with the ranks that compute while it polls: spinning takes a core from them, and a
// thread that spins is a CPU hog to the scheduler, which then makes it wait its turn behind
// the computing ranks each time it is preempted. The expert all-to-all's rows then moved
// mostly while the ranks waited for them (docs/moe.md, "Overlapped all-to-all"). Polling
// with short sleeps keeps the worker a thread that mostly sleeps, which the scheduler runs
// at once when it wakes, for one MPI_Test per quantum.
#pragma once

#include <chrono>
#include <functional>

#include "comm/communicator.h"

namespace mt::hybrid {

struct SleepingWait {
  int spin_polls = 16;  // polls at once first: a short collective returns without a sleep
  std::chrono::microseconds quantum{100};
  // The group's timeout (WorldOptions::timeout_s). The loop itself keeps it: once the wait
  // has lasted that long, Work::wait_after fails the step with the time really waited (so a
  // stuck step between processes fails at the timeout, and its message says how long).
  double timeout_s = 300;
  // Empty: std::this_thread::sleep_for and core/timer.h's now_seconds (tests pass their own).
  std::function<void(std::chrono::microseconds)> sleep;
  std::function<double()> clock;
};

// Returns once w is complete (rethrows its failure), polling it as above.
void wait_sleeping(Work& w, const SleepingWait& how = {});
void wait_sleeping(Work&& w, const SleepingWait& how = {});

}  // namespace mt::hybrid
