// Each stage's data-parallel gradient sync placed in the pipeline replay
// (grad_sync_placement, issue #30 stop 47): Megatron-Core r0.8.0's delayed grad reduce starts
// a stage's sync after its own last backward (the first stage's from that backward's hooks),
// so a later stage's collective runs while the stages before it finish the cooldown, and the
// step waits for the last stage done (the optimizer's model-parallel gradient norm).
#include <gtest/gtest.h>

#include <algorithm>

#include "plan/hardware_costs.h"
#include "plan/software_profiles.h"
#include "plan/time_model.h"
#include "plan_test_util.h"
#include "schedule/schedule.h"

namespace mt::plan {
namespace {

// A small GPT on 2 stages x dp 4 under ZeRO 1, 4 microbatches, links slow enough that the
// reduce-scatter outlasts a microbatch's backward.
PlanRequest request() {
  PlanRequest r = testing::mcore_small_gpt(8);
  r.hardware.intra_busbw = r.hardware.inter_busbw = 2e9;
  r.hardware.collective_sms = 0;  // the hidden part's SMs: test_plan_collective_sms
  return r;
}

Layout layout(const char* schedule, int v) {
  Layout l;
  l.dp = 4, l.pp = 2, l.zero = 1, l.micro_batch = 1, l.precision = Precision::bf16;
  l.schedule = schedule, l.virtual_stages = v;
  return l;
}

// 1F1B: stage 0's last backward ends last, B0 + p2p after stage 1's (stage 0 waits for its
// gradient in the cooldown). Stage 1 then runs its passes and its whole reduce-scatter;
// stage 0 its passes, with its collective started a whole backward earlier (dp_overlap 1,
// the hooks). The step's syncs end max(pass0 - B0 + reduce0, pass1 + reduce1 - B0 - p2p)
// after the makespan.
TEST(PlanGradSync, DelayedSyncEndsWhenTheLastStagesCollectiveDoes) {
  const PlanRequest r = request();
  EXPECT_EQ(r.hardware.grad_sync_placement, 2);
  EXPECT_EQ(r.hardware.grad_sync_pass_bytes, 12);
  const Layout l = layout("1f1b", 1);
  const std::vector<StageCosts> sc = stage_costs(r, l);
  const HardwareProfile& hw = r.hardware;
  const GroupSpan dp = group_span(hw, 4, 1);
  double pass[2], reduce[2];
  for (int st = 0; st < 2; ++st) {
    pass[st] = sc[size_t(st)].params * 12 / hw.memory_bw + hw.kernel_overhead_s;
    reduce[st] = collective_seconds(hw, Collective::reduce_scatter, sc[size_t(st)].params * 4, dp);
  }
  const double b0 = sc[0].backward + sc[0].weight;
  EXPECT_GT(reduce[0], b0);
  const PredictedTime t = predict_time(r, l, make_schedule("1f1b", 2, 4, 1));
  const double want = std::max(pass[0] - b0 + reduce[0], pass[1] + reduce[1] - b0 - t.pp_p2p_s);
  EXPECT_NEAR(t.grad_sync_tail_s, want, 1e-12);
  EXPECT_GT(t.grad_sync_tail_s, 0);
  EXPECT_NEAR(t.step_s, t.pipeline_s + t.dp_exposed_s + t.optimizer_s, 1e-12);
}

// Interleaved: each chunk's sync starts in the cooldown (stage r r backwards after the
// chunk's last), so most of its collective runs under the other chunks' backwards; synced
// after each stage's whole list (placement 1), the collectives cannot hide there.
TEST(PlanGradSync, InterleavedChunksSyncUnderTheCooldown) {
  PlanRequest r = request();
  const Layout l = layout("interleaved", 2);
  const Schedule s = make_schedule("interleaved", 2, 4, 2);
  const PredictedTime delayed = predict_time(r, l, s);
  r.hardware.grad_sync_placement = 1;
  const PredictedTime after = predict_time(r, l, s);
  EXPECT_LT(delayed.grad_sync_tail_s, after.grad_sync_tail_s - 1e-3);
  EXPECT_LT(delayed.step_s, after.step_s);
}

}  // namespace
}  // namespace mt::plan
