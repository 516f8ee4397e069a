// Stop 39's busy tp probe (busy_tp_latency_s, busy_tp_busbw: two rank threads computing
// between collectives, a difference of two loops) is retired: it read a latency of 0 and 4x
// the idle busbw, and priced with it every tp2 layout of stop 39's quiet loop read 4-9%
// faster than without it and than measured (docs/planner.md). The tp collectives are priced
// at the idle figures; profiles that carry the old keys still load and the keys change
// nothing.
#include <gtest/gtest.h>

#include <string>

#include "plan/hardware_profile.h"
#include "plan/profile_fields.h"
#include "plan/time_model.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

Layout tp2(bool sp) {
  Layout l;
  l.tp = 2, l.micro_batch = 2, l.sequence_parallel = sp;
  return l;
}

// A stored profile with the retired keys (as bench/planner/logs/bench39_local.toml): it
// loads, and the plan is the same as without them, the tp collectives at the idle figures.
TEST(PlanBusyTp, TheRetiredKeysLoadAndPriceNothing) {
  PlanRequest r = testing::small_request(2);
  r.hardware.cores = 2;
  const std::string plain = profile_to_toml(r.hardware);
  const std::string with_keys = plain + "busy_tp_latency_s = 0.0\nbusy_tp_busbw = " +
                                std::to_string(4 * r.hardware.intra_busbw) + "\n";
  PlanRequest old = r;
  old.hardware = parse_profile_toml(with_keys, "old.toml");
  r.hardware = parse_profile_toml(plain, "new.toml");
  for (const bool sp : {false, true}) {
    const PredictedTime a = predict_time(old, tp2(sp), Schedule{});
    const PredictedTime b = predict_time(r, tp2(sp), Schedule{});
    EXPECT_GT(b.tp_exposed_s, 0) << sp;
    EXPECT_DOUBLE_EQ(a.tp_exposed_s, b.tp_exposed_s) << sp;
    EXPECT_DOUBLE_EQ(a.step_s, b.step_s) << sp;
  }
  // A written profile no longer carries them.
  EXPECT_EQ(profile_to_toml(old.hardware).find("busy_tp"), std::string::npos);
}

}  // namespace
}  // namespace mt::plan
