// The planner's memory per device against the engine's memory records of real one-step
// runs, layout by layout (ZeRO 0-3, tp with and without SP, the four pipeline schedules,
// MoE expert parallelism, recomputation, fp32 and bf16).
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/attention.h"
#include "kernels/matmul_bf16.h"
#include "plan/memory_model.h"
#include "plan_test_util.h"
#include "schedule/schedule.h"
#include "train/memory_estimate.h"

namespace mt::plan {
namespace {

using testing::run_and_record;
using testing::small_request;

struct Case {
  const char* name;
  Layout layout;
  int experts = 0;
};

Schedule schedule_of(const PlanRequest& r, const Layout& l) {
  if (l.pp == 1) return {};
  return make_schedule(l.schedule, l.pp, r.batch / (l.dp * l.micro_batch), l.virtual_stages);
}

TEST(PlanMemory, MatchesTheMemoryRecordsOfRealRuns) {
  auto L = [](int dp, int tp, int pp, int zero, bool sp, const char* rc, int mb,
              const char* sched = "1f1b", int v = 1, int ep = 1) {
    Layout l;
    l.dp = dp, l.tp = tp, l.pp = pp, l.zero = zero, l.sequence_parallel = sp,
    l.recompute = recompute_of(rc);
    l.micro_batch = mb, l.schedule = sched, l.virtual_stages = v, l.ep = ep;
    return l;
  };
  auto bf16 = [](Layout l) {
    l.precision = Precision::bf16;
    return l;
  };
  const std::vector<Case> cases = {
      {"one rank", L(1, 1, 1, 0, false, "none", 8)},
      {"dp2 zero0", L(2, 1, 1, 0, false, "none", 4)},
      {"dp2 zero1", L(2, 1, 1, 1, false, "none", 4)},
      {"dp2 zero2", L(2, 1, 1, 2, false, "none", 2)},
      {"dp2 zero3", L(2, 1, 1, 3, false, "none", 4)},
      {"tp2", L(1, 2, 1, 0, false, "none", 8)},
      {"tp2 sp", L(1, 2, 1, 0, true, "none", 8)},
      {"pp2 1f1b m4", L(1, 1, 2, 0, false, "none", 2)},
      {"pp2 gpipe m4", L(1, 1, 2, 0, false, "none", 2, "gpipe")},
      {"pp2 interleaved v2 m4", L(1, 1, 2, 0, false, "none", 2, "interleaved", 2)},
      {"pp2 zb-h1 m4 dp2 zero3", L(2, 1, 2, 3, false, "none", 1, "zb-h1")},
      {"moe ep2 dp2", L(2, 1, 1, 0, false, "none", 4, "1f1b", 1, 2), 4},
      {"moe ep2 dp2 zero2", L(2, 1, 1, 2, false, "selective", 4, "1f1b", 1, 2), 4},
      {"recompute selective", L(1, 1, 1, 0, false, "selective", 8)},
      {"recompute full", L(1, 1, 1, 0, false, "full", 8)},
      {"tp2 sp full", L(1, 2, 1, 0, true, "full", 8)},
      {"pp2 1f1b dp2 zero1 selective", L(2, 1, 2, 1, false, "selective", 1)},
      // --precision bf16: bf16 activation slots and the linears' bf16 weight copies.
      {"bf16 one rank", bf16(L(1, 1, 1, 0, false, "none", 8))},
      {"bf16 dp2 zero3", bf16(L(2, 1, 1, 3, false, "none", 4))},
      {"bf16 tp2 sp selective", bf16(L(1, 2, 1, 0, true, "selective", 8))},
      {"bf16 pp2 1f1b m4", bf16(L(1, 1, 2, 0, false, "none", 2))},
      {"bf16 full", bf16(L(1, 1, 1, 0, false, "full", 8))},
      {"bf16 moe ep2 dp2 zero2", bf16(L(2, 1, 1, 2, false, "none", 4, "1f1b", 1, 2)), 4},
  };
  std::printf("%-30s %12s %12s %12s %12s\n", "layout", "act planned", "act record", "state+buf pl",
              "state record");
  int skipped = 0;
  for (const Case& c : cases) {
    if (c.layout.precision == Precision::bf16 && !bf16_matmul_supported()) {
      std::printf("%-30s skipped: no bf16 matmul on this CPU\n", c.name);
      ++skipped;
      continue;
    }
    PlanRequest r = small_request(c.layout.world());
    r.model.experts = c.experts;
    // A profile of this CPU, as --calibrate records it: a local plan counts the profile's
    // attention kernels (model/kernel_target.h), which must be the ones the runs take here.
    r.hardware.attention_kernels = attention_isa().bits();
    validate_candidate(r, c.layout);
    const TrainOptions o = train_options(r, c.layout);
    const PlannedMemory m = planned_memory(r, c.layout, schedule_of(r, c.layout));
    const MemoryEstimate e = estimate_rank_memory(o);
    test_util::TempDir dir;
    const testing::Record rec = run_and_record(o, dir);
    // The record's params and grads include the ZeRO gather buffers and gradient bucket
    // pool, which the planner lists as buffers (with the workspace and, locally, the
    // model arenas the engine re-allocates at the end of a run).
    const int64_t state_planned =
        m.params + m.grads + m.optimizer + e.buffers_bytes - rec.bf16_weights;
    const int64_t state_record = rec.params + rec.grads + rec.optimizer;
    std::printf("%-30s %12lld %12lld %12lld %12lld\n", c.name, (long long)m.activations,
                (long long)rec.activations, (long long)state_planned, (long long)state_record);
    // Every part equal to the byte (the planner counts the bf16 weight copies, which the
    // record lists apart, in params).
    EXPECT_EQ(m.activations, rec.activations) << c.name;
    EXPECT_EQ(m.params + m.grads + e.buffers_bytes - rec.bf16_weights, rec.params + rec.grads)
        << c.name;
    EXPECT_EQ(e.bf16_weight_bytes, rec.bf16_weights) << c.name;
    EXPECT_EQ(rec.bf16_weights > 0, c.layout.precision == Precision::bf16) << c.name;
    EXPECT_EQ(m.optimizer, rec.optimizer) << c.name;
    // The planner's total is the engine's peak for the profile's CPU, and never under what
    // train's own memory check refuses on here (the plan counts the bf16 GEMM path's scratch
    // that the most any CPU keeps: kernel_target.h).
    const MemoryEstimate profile = estimate_rank_memory(
        o, schedule_of(r, c.layout), KernelTarget::profile, profile_kernels(r.hardware));
    EXPECT_EQ(m.total(), profile.peak()) << c.name;
    EXPECT_LE(e.peak(), m.total()) << c.name;
  }
  // Seen by ctest and scripts/test.sh's skip check, not only in this test's printout.
  if (skipped) GTEST_SKIP() << skipped << " bf16 layouts: no oneDNN bf16 matmul on this CPU";
}

TEST(PlanMemory, Bf16OnGpuHalvesActivationsAndAddsAWeightCopy) {
  PlanRequest r = small_request(1);
  r.hardware = preset_profile("a100-80gb");
  Layout l;
  l.micro_batch = 8;
  const PlannedMemory fp32 = planned_memory(r, l, Schedule{});
  l.precision = Precision::bf16;
  const PlannedMemory bf16 = planned_memory(r, l, Schedule{});
  EXPECT_EQ(bf16.activations, fp32.activations / 2);
  EXPECT_EQ(bf16.params, fp32.params + fp32.params / 2);
  EXPECT_EQ(bf16.optimizer, fp32.optimizer);
}

}  // namespace
}  // namespace mt::plan
