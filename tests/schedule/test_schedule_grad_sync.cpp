// The data-parallel gradient sync placed in the schedule replay (OpCosts::sync,
// grad_sync_points.h): where each stage starts each chunk's sync, and toy pipelines whose
// finish times are worked out by hand below.
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <vector>

#include "schedule/execution_order.h"
#include "schedule/grad_sync_points.h"
#include "schedule/schedule.h"
#include "schedule/schedule_simulator.h"

namespace mt {
namespace {

OpCosts costs(double pass, double reduce, double hidden, int delay) {
  OpCosts c{1, 2, 0, 0};  // F 1, fused B 2, no latency
  c.sync = {true, pass, reduce, hidden, delay};
  return c;
}

// 1F1B, 2 stages, 2 microbatches, F 1, B 2 (no sync):
//   stage 0: F0 [0,1] F1 [1,2] B0 [4,6] B1 [7,9]
//   stage 1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7]
// Megatron-Core's delayed sync (delay = the stage's rank): stage 1 has no backward after
// its last, so it syncs after its list: pass [7, 7.5], reduce [7.5, 11.5]. Stage 0 syncs
// from its last backward's hooks: pass to 9.5, its collective may start half of B1 (1)
// before that: [8.5, 12.5]. The step's syncs end at 12.5, 3.5 past the makespan.
TEST(ScheduleGradSync, DelayedSyncOfA1f1bPipelineByHand) {
  const Schedule s = make_schedule("1f1b", 2, 2, 1);
  const Timeline none = simulate_schedule(s, OpCosts{1, 2, 0, 0});
  EXPECT_DOUBLE_EQ(none.makespan, 9);
  EXPECT_DOUBLE_EQ(none.synced_end(), 9);
  EXPECT_EQ(none.finish, (std::vector<double>{9, 7}));
  const Timeline t = simulate_schedule(s, {costs(0.5, 4, 0.5, 0), costs(0.5, 4, 0, 1)});
  EXPECT_DOUBLE_EQ(t.makespan, 9);  // the syncs come after each stage's last compute
  EXPECT_EQ(t.finish, (std::vector<double>{12.5, 11.5}));
  EXPECT_DOUBLE_EQ(t.synced_end(), 12.5);
  // Each stage after its own last backward, nothing hidden (Megatron-LM 2021/2022): stage
  // 0 [9, 9.5] + 4, stage 1 [7, 7.5] + 4.
  const Timeline after =
      simulate_schedule(s, {costs(0.5, 4, 0, INT_MAX), costs(0.5, 4, 0, INT_MAX)});
  EXPECT_EQ(after.finish, (std::vector<double>{13.5, 11.5}));
}

// Interleaved, 2 stages, 2 microbatches, 2 chunks, F 1, B 2. Without sync, stage 0 runs
// B0.1 [6,8] B1.1 [9,11] B0 [11,13] B1 [13,15] and stage 1 B0.1 [4,6] B1.1 [7,9] B0 [9,11]
// B1 [11,13]. With the delayed sync (pass 0.5, reduce 4): stage 0 starts chunk 1's right
// after B1.1 (pass to 11.5, so its SEND_GRAD and stage 1's B0 wait for it; reduce
// [11.5,15.5]) and chunk 0's after B1; stage 1 starts chunk 1's one backward later, after
// B0 [9,11] (pass to 11.5: its SEND_GRAD leaves at 11.5, so stage 0's B1 runs [13.5,15.5];
// reduce [11.5,15.5]) and chunk 0's after its list (B1 [11.5,13.5], pass to 14, reduce
// after chunk 1's: [15.5,19.5]). Stage 0: B0 [11.5,13.5], B1 [13.5,15.5], pass to 16,
// reduce [16,20]. The passes chain through the sends; the collectives do not.
TEST(ScheduleGradSync, DelayedSyncOfAnInterleavedPipelineByHand) {
  const Schedule s = make_schedule("interleaved", 2, 2, 2);
  const Timeline t = simulate_schedule(s, {costs(0.5, 4, 0, 0), costs(0.5, 4, 0, 1)});
  auto end_of = [&](int st, const std::string& name) {
    for (const TimedAction& a : t.stages[size_t(st)])
      if (to_string(s.actions[size_t(st)][size_t(a.index)]) == name) return a.end;
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(end_of(0, "B1.1"), 11);
  EXPECT_DOUBLE_EQ(end_of(0, "B0"), 13.5);
  EXPECT_DOUBLE_EQ(end_of(0, "B1"), 15.5);
  EXPECT_DOUBLE_EQ(end_of(1, "B1"), 13.5);
  EXPECT_DOUBLE_EQ(t.makespan, 15.5);
  EXPECT_EQ(t.finish, (std::vector<double>{20, 19.5}));
}

// Where the syncs start: a chunk's last gradient computation plus the delay, else after the
// list; with a split backward the W carries the weight gradients.
TEST(ScheduleGradSync, PointsFollowTheChunksLastGradientByTheDelay) {
  const Schedule s = make_schedule("interleaved", 2, 2, 2);
  const std::vector<ExecStep> steps = execution_order(s, 1);
  auto name = [&](size_t i) { return to_string(s.actions[1][size_t(steps[i].index)]); };
  for (int delay : {0, 1, 2, 4}) {
    const GradSyncPoints g = grad_sync_points(s, 1, steps, delay);
    std::vector<std::string> at;
    for (size_t i = 0; i < steps.size(); ++i)
      for (int c : g.after_step[i]) at.push_back(name(i) + ":" + std::to_string(c));
    for (int c : g.at_end) at.push_back("end:" + std::to_string(c));
    const std::vector<std::vector<std::string>> want = {
        {"B1.1:1", "B1:0"}, {"B0:1", "end:0"}, {"B1:1", "end:0"}, {"end:0", "end:1"}};
    EXPECT_EQ(at, want[size_t(delay == 4 ? 3 : delay)]) << delay;
  }
  const Schedule zb = make_schedule("zb-h1", 2, 2, 1);
  const std::vector<ExecStep> zsteps = execution_order(zb, 0);
  const GradSyncPoints g = grad_sync_points(zb, 0, zsteps, 0);
  size_t last_w = 0;
  for (size_t i = 0; i < zsteps.size(); ++i)
    if (zb.actions[0][size_t(zsteps[i].index)].kind == ActionKind::W) last_w = i;
  EXPECT_EQ(g.after_step[last_w], std::vector<int>{0});
  EXPECT_TRUE(g.own_last[last_w]);
}

}  // namespace
}  // namespace mt
