// The wake-up probe (plan/wake_probe.cpp) and its profile field.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

#include "core/core_binding.h"
#include "plan/calibration_probes.h"
#include "plan/hardware_profile.h"

namespace mt::plan {
namespace {

// With the other ranks waiting (the case the profile keeps), the probe's rank 0 sleeps (its
// 32 yields end long before rank 1's ~1 ms of work) and runs again within a few of the
// scheduler's slices. With the others computing it seldom sleeps at all (its yields hand
// them the core): printed, not checked. A timing, so label full.
TEST(PlanWakeProbe, ASleepingRankRunsAgainWithinSlices) {
  const int cores = int(allowed_cores().size());
  for (bool busy : {false, true}) {
    const WakeCost c = wake_cost(cores, 0.3, busy);
    std::printf("others %s: median %.1f us, p90 %.1f us, %d waits slept (%.0f%%)\n",
                busy ? "computing" : "waiting", c.median_s * 1e6, c.p90_s * 1e6, c.samples,
                100 * c.slept_share);
    if (busy) continue;
    EXPECT_GT(c.samples, 0);
    EXPECT_GT(c.median_s, 0);
    EXPECT_LT(c.median_s, 20e-3);
    EXPECT_GE(c.p90_s, c.median_s);
  }
}

}  // namespace
}  // namespace mt::plan
