// pipeline_bubble: each rank's idle time is measured against the slowest rank's step, so a
// stage that finishes early still counts the time it waits for the others.
#include <gtest/gtest.h>

#include <vector>

#include "comm/world.h"
#include "parallel/pipeline/pipeline_stage.h"

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

}  // namespace
}  // namespace mt
