// Stop 46: the tensor-parallel layouts' own calibrated parallel efficiency
// (HardwareProfile::parallel_efficiency_tp, from a real tp 2 step of the reference model).
// It prices a tp layout whose rank threads have a core each in place of the dp 2 figure;
// absent, every layout is priced as before; oversubscribed layouts keep the dp 2 figure.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "plan/hardware_costs.h"
#include "plan/hardware_profile.h"
#include "plan/profile_fields.h"
#include "plan/time_model.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

PlanRequest two_cores(int devices) {
  PlanRequest r = testing::small_request(devices);
  r.hardware.cores = 2;
  r.hardware.parallel_efficiency = 0.8;
  return r;
}

Layout grid(int dp, int tp, bool sp = false) {
  Layout l;
  l.dp = dp, l.tp = tp, l.sequence_parallel = sp;
  l.micro_batch = 8 / dp;
  return l;
}

double step(const PlanRequest& r, const Layout& l) {
  return predict_time(r, l, Schedule{}).step_s;
}

// tp 2 on two cores is priced exactly as if the profile's parallel_efficiency were the tp
// figure, and strictly faster than at the dp 2 figure; dp 2 does not move.
TEST(PlanTpEfficiency, TpLayoutsOnTheirOwnCoresUseTheTpFigure) {
  const PlanRequest dp_figure = two_cores(2);
  PlanRequest with_tp = dp_figure;
  with_tp.hardware.parallel_efficiency_tp = 0.95;
  PlanRequest as_if = dp_figure;
  as_if.hardware.parallel_efficiency = 0.95;
  for (const bool sp : {false, true}) {
    const Layout tp2 = grid(1, 2, sp);
    EXPECT_DOUBLE_EQ(step(with_tp, tp2), step(as_if, tp2)) << sp;
    EXPECT_LT(step(with_tp, tp2), step(dp_figure, tp2) * 0.99) << sp;
  }
  EXPECT_DOUBLE_EQ(step(with_tp, grid(2, 1)), step(dp_figure, grid(2, 1)));
}

// Without the field (0), or at the dp 2 figure, every layout is priced as before, bit for
// bit; where the ranks' threads outnumber the cores (tp 4, dp 2 x tp 2, 2 threads per tp 2
// rank) the dp 2 figure stays: the tp 2 probe ran a core per rank.
TEST(PlanTpEfficiency, AbsentOrOversubscribedKeepsTheDpFigure) {
  for (const int devices : {2, 4}) {
    const PlanRequest before = two_cores(devices);
    PlanRequest same = before;
    same.hardware.parallel_efficiency_tp = before.hardware.parallel_efficiency;
    PlanRequest other = before;
    other.hardware.parallel_efficiency_tp = 0.95;
    for (const Layout& l : {grid(devices, 1), grid(1, devices), grid(devices / 2, 2, true)}) {
      EXPECT_DOUBLE_EQ(step(same, l), step(before, l)) << devices;
      if (devices == 4) {
        EXPECT_DOUBLE_EQ(step(other, l), step(before, l)) << l.dp << l.tp;
      }
    }
  }
  PlanRequest threads = two_cores(2);
  threads.threads = 2;
  PlanRequest other = threads;
  other.hardware.parallel_efficiency_tp = 0.95;
  EXPECT_DOUBLE_EQ(step(other, grid(1, 2)), step(threads, grid(1, 2)));
  EXPECT_EQ(layout_parallel_efficiency(other.hardware, 2, 2, 2), 0.8);
  EXPECT_EQ(layout_parallel_efficiency(other.hardware, 2, 2, 1), 0.95);
  EXPECT_EQ(layout_parallel_efficiency(other.hardware, 1, 2, 1), 0.8);
}

// The field is a fraction like parallel_efficiency: nan, inf and values above 1 are refused
// with its name; a written profile carries it and reads back the same.
TEST(PlanTpEfficiency, TheFieldIsCheckedAndRoundTrips) {
  HardwareProfile h = testing::synthetic_local();
  h.parallel_efficiency_tp = 0.93;
  const HardwareProfile back = parse_profile_toml(profile_to_toml(h), "tp.toml");
  EXPECT_EQ(back.parallel_efficiency_tp, 0.93);
  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity(), 1.5, -0.1}) {
    h.parallel_efficiency_tp = bad;
    EXPECT_NE(profile_field_error(h).find("parallel_efficiency_tp"), std::string::npos) << bad;
  }
  h.parallel_efficiency_tp = 0;
  EXPECT_EQ(profile_field_error(h), "");
}

}  // namespace
}  // namespace mt::plan
