// --calibrate-seconds governs the probes that start child processes (reference training
// steps, mpirun): a run is started only while the probe's share of the budget holds it, and
// what is left out is said. Before stop 40 they ignored the budget: a 2-second calibration
// (PlanCommand.CalibrateThenPlanLocalThenTrainWithAutoLayout) ran ten training children
// and three mpirun launches, ~34 s of the suite.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "plan/calibration_probes.h"
#include "plan/calibration_timing.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

TEST(PlanCalibrationBudget, AShareTooShortForMpirunLaunchesNoneAndSaysSo) {
  HardwareProfile h = testing::synthetic_local();
  h.mpi_busbw = h.mpi_latency_s = h.mpi_p2p_bw = 0;
  std::ostringstream log;
  measure_mpi_links(h, ProbeRun{0.01, 0.01, log});
  EXPECT_EQ(h.mpi_busbw, 0);
  EXPECT_NE(log.str().find("share of --calibrate-seconds"), std::string::npos) << log.str();
}

TEST(PlanCalibrationBudget, AShareTooShortForTrainingStepsKeepsTheFiguresAndSaysSo) {
  HardwareProfile h = testing::synthetic_local();
  h.reference_step_s = 0.1;  // 8 dp 2 steps of about half that: 0.4 s
  h.parallel_efficiency = 0.77;
  h.moe_load_cv = 0;
  std::ostringstream log;
  measure_step_parallel_efficiency(h, ProbeRun{0.01, 0.01, log});
  measure_moe_load_spread(h, ProbeRun{0.0, 0.01, log});
  EXPECT_EQ(h.parallel_efficiency, 0.77);
  EXPECT_EQ(h.moe_load_cv, 0);
  EXPECT_NE(log.str().find("parallel efficiency from a real dp 2 step"), std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("MoE load spread not measured"), std::string::npos) << log.str();
}

TEST(PlanCalibrationBudget, ARunStartsOnlyWhileTheShareHoldsIt) {
  ChildBudget budget(60);
  EXPECT_TRUE(budget.allows(1));
  EXPECT_FALSE(budget.allows(120));
  EXPECT_EQ(budget.time([] { return 7; }), 7);
  EXPECT_GE(budget.last_run_s(), 0);
  EXPECT_FALSE(ChildBudget(0).allows(1e-3));
}

}  // namespace
}  // namespace mt::plan
