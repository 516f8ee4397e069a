// pipeline_bubble: each rank's idle time is measured against the slowest rank's step, so a
// stage that finishes early still counts the time it waits for the others.
#include <gtest/gtest.h>

#include <vector>

#include "comm/rank_order_sum.h"
#include "comm/world.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "schedule/schedule.h"

namespace mt {
namespace {

TEST(PipelineBubble, IdleCountedAgainstTheSlowestRank) {
  // Rank 0: busy 6 of its 10 s; rank 1: busy 6 of 8 s (it stopped its clock early).
  // Window 10 s: idle 4 + 4 = 8 of 20 rank-seconds -> 40%, not the 30% of own clocks.
  std::vector<double> got(2, -1);
  run_local(2, WorldOptions{}, [&](CommWorld& w) {
    const double step = w.rank() == 0 ? 10.0 : 8.0;
    got[size_t(w.rank())] = pipeline_bubble(*w.world(), 6.0, step);
  });
  EXPECT_DOUBLE_EQ(got[0], 0.4);
  EXPECT_DOUBLE_EQ(got[1], 0.4);
}

TEST(PipelineBubble, OneRankAndZeroStep) {
  run_local(1, WorldOptions{}, [&](CommWorld& w) {
    EXPECT_DOUBLE_EQ(pipeline_bubble(*w.world(), 3.0, 4.0), 0.25);
    EXPECT_DOUBLE_EQ(pipeline_bubble(*w.world(), 0.0, 0.0), 0.0);
  });
}

TEST(PipelineStage, TheoreticalBubbleAndSums) {
  EXPECT_NEAR(theoretical_bubble(make_schedule("1f1b", 4, 8, 1)), 3.0 / 11, 1e-12);
  EXPECT_NEAR(theoretical_bubble(make_schedule("interleaved", 4, 8, 2)), 3.0 / 19, 1e-12);
  EXPECT_NEAR(theoretical_bubble(make_schedule("zb-h1", 4, 8, 1)), 1.0 / 9, 1e-12);
  run_local(3, WorldOptions{}, [](CommWorld& w) {
    const double x = 0.1 * (w.rank() + 1);
    EXPECT_EQ(sum_in_rank_order(*w.world(), x), (0.1 + 0.2) + 0.30000000000000004);
  });
}

}  // namespace
}  // namespace mt
