// The waits that sleep on oversubscribed cores (plan/rank_waits.h) and the wall their
// wake-ups add at the profile's oversubscribed_wake_s (plan/wake_probe.cpp).
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/hardware_profile.h"
#include "plan/profile_fields.h"
#include "plan/rank_waits.h"
#include "plan/time_model.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

PlanRequest llama_on(int cores, double wake_s) {
  PlanRequest r = testing::small_request(4);
  r.model.arch = Arch::llama;
  r.model.kv_heads = 2;
  r.hardware.cores = cores;
  r.hardware.oversubscribed_wake_s = wake_s;
  return r;
}

Layout grid(int dp, int tp, int pp, int micro_batch, const char* schedule = "1f1b") {
  Layout l;
  l.dp = dp, l.tp = tp, l.pp = pp, l.micro_batch = micro_batch, l.schedule = schedule;
  return l;
}

PredictedTime predict(const PlanRequest& r, const Layout& l) {
  return predict_time(r, l, make_schedule(l.schedule, l.pp, microbatches(r, l), 1));
}

TEST(PlanRankWaits, TheProfileFieldIsFiniteAndOptional) {
  const std::string base =
      "[hardware]\nname = \"x\"\nlocal = true\nmemory_bytes = 8e10\npeak_fp32 = 1e11\n"
      "memory_bw = 1e10\nintra_busbw = 1e10\np2p_bw_intra = 1e10\n";
  EXPECT_EQ(parse_profile_toml(base, "old.toml").oversubscribed_wake_s, 0);
  EXPECT_EQ(
      parse_profile_toml(base + "oversubscribed_wake_s = 3e-4\n", "new.toml").oversubscribed_wake_s,
      3e-4);
  for (const std::string bad : {"oversubscribed_wake_s = nan", "oversubscribed_wake_s = inf",
                                "oversubscribed_wake_s = -1e-6"})
    EXPECT_THROW(parse_profile_toml(base + bad + "\n", "bad.toml"), UsageError) << bad;
}

// GPipe, 2 stages, 1 microbatch: stage 1 reaches its activation's receive before stage 0
// has computed it, stage 0 its gradient's receive before stage 1 has sent it: one block
// each. Hand count.
TEST(PlanRankWaits, TheReplayCountsTheReceivesReachedBeforeTheirSend) {
  const Schedule s = make_schedule("gpipe", 2, 1, 1);
  std::vector<int> blocked;
  shared_cores_makespan(s, std::vector<OpCosts>(2, OpCosts{1.0, 2.0, 0.0, 0.0}), 1, 2, 0, &blocked);
  EXPECT_EQ(blocked, (std::vector<int>{1, 1}));
  // tp 2 x pp 2: one more per block (the first collective after the wake), and the two
  // world all-reduces for half the ranks.
  EXPECT_DOUBLE_EQ(blocking_waits_per_rank(grid(1, 2, 2, 8), blocked, 2), 1 + 1 + 1);
  EXPECT_DOUBLE_EQ(blocking_waits_per_rank(grid(2, 1, 2, 8), blocked, 2), 1 + 1);
  EXPECT_DOUBLE_EQ(blocking_waits_per_rank(grid(2, 2, 1, 8), {}, 2), 0);
}

// The same profile with and without the probe's figure: 4 ranks on 2 cores pay every
// counted wait's wake-up, and tp 2 x pp 2 (pipeline blocks) more than dp 2 x tp 2 (none);
// on 4 cores (a core per rank: waiters spin, nobody sleeps) the figure changes nothing.
// Mutation: without the term (time_model.cpp, predict_time's wake_s) the first two
// expectations fail.
TEST(PlanRankWaits, MoreWaitsRankLowerOnlyWhenRanksOutnumberCores) {
  const double wake = 300e-6;
  const Layout piped = grid(1, 2, 2, 1, "zb-h1"), flat = grid(2, 2, 1, 4);
  for (int cores : {2, 4}) {
    const PlanRequest without = llama_on(cores, 0), with = llama_on(cores, wake);
    const PredictedTime p0 = predict(without, piped), p1 = predict(with, piped);
    const PredictedTime f0 = predict(without, flat), f1 = predict(with, flat);
    if (cores == 2) {
      EXPECT_GT(p1.blocking_waits, f1.blocking_waits);
      EXPECT_NEAR(p1.step_s - p0.step_s, p1.blocking_waits * wake, 1e-12);
      EXPECT_GT(p1.step_s - p0.step_s, f1.step_s - f0.step_s);
    } else {
      EXPECT_EQ(p1.step_s, p0.step_s);
      EXPECT_EQ(f1.step_s, f0.step_s);
    }
  }
}

}  // namespace
}  // namespace mt::plan
