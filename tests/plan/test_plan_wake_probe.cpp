// The wake-up probe (plan/wake_probe.cpp) and its profile field.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

#include "core/core_binding.h"
#include "plan/calibration_probes.h"
#include "plan/hardware_profile.h"

namespace mt::plan {
namespace {

// The probe's rank 0 sleeps (the doorbell's yields end long before rank 1's ~2 ms of work)
// and is run again within a few of the scheduler's slices. A timing, so label full.
TEST(PlanWakeProbe, ASleepingRankRunsAgainWithinSlices) {
  const int cores = int(allowed_cores().size());
  for (bool busy : {true, false}) {
    const WakeCost c = wake_cost(cores, 0.3, busy);
    std::printf("others %s: median %.1f us, p90 %.1f us, %d waits slept (%.0f%%)\n",
                busy ? "busy" : "idle", c.median_s * 1e6, c.p90_s * 1e6, c.samples,
                100 * c.slept_share);
    EXPECT_GT(c.samples, 0);
    EXPECT_GT(c.median_s, 0);
    EXPECT_LT(c.median_s, 20e-3);
    EXPECT_GE(c.p90_s, c.median_s);
  }
}

}  // namespace
}  // namespace mt::plan
