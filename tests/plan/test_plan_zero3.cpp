// ZeRO 3 / FSDP's per-block gathers against the compute they prefetch under
// (plan/zero3_overlap.h): the first block's gather and the last reduce-scatter of every pass
// stay exposed, the prefetch depth bounds how far ahead the gathers run, and a 70B Llama
// over 512 H100s (the case a user caught: every gather hidden) shows what cannot hide.
#include <gtest/gtest.h>

#include <algorithm>

#include "plan/hardware_costs.h"
#include "plan/search.h"
#include "plan/software_profiles.h"
#include "plan/time_model.h"
#include "plan/zero3_overlap.h"
#include "schedule/schedule.h"

namespace mt::plan {
namespace {

TEST(PlanZero3, GathersThatFitUnderTheComputeExposeTheFirstAndTheTail) {
  const int n = 10;
  // Gathers shorter than a block's compute: the forward waits for the first only, the
  // backward for the first gather and the last reduce-scatter.
  EXPECT_DOUBLE_EQ(zero3_pass_exposed({5, 2, 0}, n, 1), 2);
  EXPECT_DOUBLE_EQ(zero3_pass_exposed({5, 2, 1.5}, n, 1), 2 + 1.5);
  // Without prefetch every gather waits for the block before to end: nothing hides.
  EXPECT_DOUBLE_EQ(zero3_pass_exposed({5, 2, 0}, n, 0), n * 2);
  // Gathers longer than the compute: the comm stream is the pass's critical path.
  EXPECT_DOUBLE_EQ(zero3_pass_exposed({2, 5, 0}, n, 1), n * 5 + 2 - n * 2);
  EXPECT_DOUBLE_EQ(zero3_pass_exposed({2, 5, 0}, n, 4), n * 5 + 2 - n * 2);
  // Gather + reduce-scatter beyond the backward's compute on every block.
  const double one_ahead = zero3_pass_exposed({4, 3, 3}, n, 1);
  EXPECT_GE(one_ahead, n * 6 - n * 4);
  // A deeper prefetch never exposes more.
  for (int depth = 1; depth < 6; ++depth)
    EXPECT_LE(zero3_pass_exposed({3, 2.5, 1}, n, depth + 1),
              zero3_pass_exposed({3, 2.5, 1}, n, depth));
  EXPECT_DOUBLE_EQ(zero3_pass_exposed({5, 2, 1}, 1, 1), 2 + 1);  // one block: all of it
}

// NCCL's all-gather and reduce-scatter are rings: n - 1 latency-bound steps, nodes - 1 of
// them across nodes; the all-reduce keeps its tree's 2 log2 n.
TEST(PlanZero3, RingCollectivesPayALatencyPerRank) {
  const HardwareProfile h = preset_profile("h100-80gb");
  const GroupSpan g = group_span(h, 512, 1);
  ASSERT_EQ(g.nodes, 64);
  const double bytes = 1e9, bw = bytes * 511 / 512 / std::min(h.intra_busbw, 8 * h.inter_busbw);
  const double ring = 448 * h.intra_latency_s + 63 * h.inter_latency_s;
  EXPECT_NEAR(collective_seconds(h, Collective::all_gather, bytes, g), ring + bw, 1e-12);
  EXPECT_NEAR(collective_seconds(h, Collective::reduce_scatter, bytes, g), ring + bw, 1e-12);
  EXPECT_NEAR(collective_seconds(h, Collective::all_reduce, bytes, g),
              18 * h.inter_latency_s + 2 * bw, 1e-12);
}

// Llama 2 70B (80 layers, 8192 wide, 64 heads / 8 kv, SwiGLU 28672), batch 1024 x 4096 on
// 512 h100-80gb, ZeRO 3 over all 512 ranks, two sequences per rank.
TEST(PlanZero3, SeventyBillionOverFiveHundredTwelveRanksExposesItsGathers) {
  PlanRequest r;
  r.model.arch = Arch::llama;
  r.model.layers = 80, r.model.dim = 8192, r.model.heads = 64, r.model.kv_heads = 8;
  r.model.ffn_dim = 28672, r.model.seq = 4096, r.model.vocab = 32000;
  r.batch = 1024;
  r.hardware = preset_profile("h100-80gb");
  apply_software(r.hardware, "meshtrain");
  r.devices = 512;
  Layout l;
  l.dp = 512, l.zero = 3, l.recompute = Recompute::full, l.precision = Precision::bf16;
  for (int mb : {1, 2}) {
    l.micro_batch = mb;
    validate_candidate(r, l);
    const int m = r.batch / (l.dp * mb);
    const PredictedTime t = predict_time(r, l, make_schedule("1f1b", 1, m, 1));
    const StageCosts sc = stage_costs(r, l)[0];
    const double block = sc.params * 4 / sc.blocks;
    const GroupSpan g = group_span(r.hardware, 512, 1);
    const double gather = collective_seconds(r.hardware, Collective::all_gather, block, g);
    const double scatter = collective_seconds(r.hardware, Collective::reduce_scatter, block, g);
    // Every microbatch: the first gather of the forward and of the backward, the last
    // reduce-scatter; what is exposed is inside the step.
    EXPECT_GE(t.zero3_exposed_s, m * (2 * gather + scatter) * (1 - 1e-9)) << "mb " << mb;
    EXPECT_NEAR(t.step_s - t.optimizer_s - t.dp_exposed_s,
                m * (sc.forward + sc.backward + sc.weight) + t.zero3_exposed_s, 1e-9 * t.step_s);
  }
}

}  // namespace
}  // namespace mt::plan
