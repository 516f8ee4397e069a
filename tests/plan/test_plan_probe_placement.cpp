// The local link probes place their rank threads as a step places them (step_placement in
// calibration_probes.h). Unbound, two fresh rank threads were often stacked on one core,
// where a spinning waiter holds the core from the peer it waits for until its spin budget
// runs out: the idle latency read the budget (44-73 us per step) instead of the ~1 us the
// bound ranks of a tp2 step pay (issue #30, docs/planner.md).
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "comm/world.h"
#include "core/core_binding.h"
#include "plan/calibration_probes.h"
#include "plan/hardware_profile.h"
#include "train/options.h"

namespace mt::plan {
namespace {

// The cores the calling thread may run on.
std::vector<int> own_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

TEST(PlanProbePlacement, TheLinkProbesPlaceRanksAsTrainDoesByDefault) {
  EXPECT_EQ(step_placement().bind, EngineOptions{}.bind);
  EXPECT_EQ(step_placement().threads_per_rank, 1);
}

// Where two ranks fit the process's cores, each probe rank runs on a core of its own, as
// the ranks of a `meshtrain train --tp 2` step do.
TEST(PlanProbePlacement, TwoProbeRanksRunOnCoresOfTheirOwn) {
  if (allowed_cores().size() < 2) GTEST_SKIP() << "one core: a step's two ranks share it too";
  std::vector<std::vector<int>> cores(2);
  run_local(2, step_placement(), [&](CommWorld& w) { cores[size_t(w.rank())] = own_cores(); });
  ASSERT_EQ(cores[0].size(), 1u);
  ASSERT_EQ(cores[1].size(), 1u);
  EXPECT_NE(cores[0][0], cores[1][0]);
}

// The oversubscribed probe (measure_oversubscribed_latency: 2 x cores busy rank threads)
// runs its ranks through run_paired_ranks: each on one core, every core holding two, the
// paired state a quiet step's unbound ranks are in. Unbound (the probe before stop 43),
// each run fell into that state (0-4 us) or a stuck one (the two early ranks on one core
// yield to each other, then sleep: 17-48 us), and the calibration read whichever mix it drew.
TEST(PlanProbePlacement, TheOversubscribedProbeRanksSitTwoPerCore) {
  const std::vector<int> all = allowed_cores();
  ASSERT_FALSE(all.empty());
  const int ranks = 2 * int(all.size());
  std::vector<std::vector<int>> cores(static_cast<size_t>(ranks));
  run_paired_ranks(ranks, [&](CommWorld& w) { cores[size_t(w.rank())] = own_cores(); });
  std::vector<int> per_core(all.size(), 0);
  for (int r = 0; r < ranks; ++r) {
    ASSERT_EQ(cores[size_t(r)].size(), 1u) << "rank " << r << " is not bound to one core";
    const auto at = std::find(all.begin(), all.end(), cores[size_t(r)][0]);
    ASSERT_NE(at, all.end());
    ++per_core[size_t(at - all.begin())];
  }
  for (size_t c = 0; c < all.size(); ++c) EXPECT_EQ(per_core[c], 2) << "core " << all[c];
}

// The latency probe charges a collective what it adds after the later rank arrives, not the
// wait of the rank that arrived first (that is the ranks' imbalance, which the model prices
// as their work): here rank 0 arrives 10 us early each call and the collective adds 1, 2
// and 30 us after rank 1 arrives; the median is 2 us.
TEST(PlanProbePlacement, TheLatencyIsTheLastReturnLessTheLastArrival) {
  const std::vector<std::vector<double>> arrive = {{0, 100, 200}, {10, 110, 210}};
  const std::vector<std::vector<double>> leave = {{11, 112, 240}, {11, 111, 240}};
  EXPECT_DOUBLE_EQ(exposed_collective_seconds(arrive, leave), 2);
  EXPECT_EQ(exposed_collective_seconds({{}, {}}, {{}, {}}), 0);
}

// The calibration's latency comes from the bound, computing pair: a step's tp collective.
// Its figure on a machine of two cores or more is the protocol's, microseconds, not a spin
// budget (tens of us): 0.5-0.8 us per step at load 12 here, where the stacked pair this
// replaced read 70 us. A timing, so label full (MESHTRAIN_FULL_TESTS=1): a CPU-bound job
// beside it (ctest -j2 ran the calibration test alongside) once took a bound rank's core.
TEST(PlanProbePlacement, TheCalibratedLatencyIsNotASpinBudget) {
  if (allowed_cores().size() < 2) GTEST_SKIP() << "one core: a step's two ranks share it too";
  HardwareProfile h;
  std::ostringstream log;
  measure_local_links(h, ProbeRun{0.5, 0.5, log});
  EXPECT_GT(h.intra_latency_s, 0);
  EXPECT_LT(h.intra_latency_s, 25e-6);
}

}  // namespace
}  // namespace mt::plan
