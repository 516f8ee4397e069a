// Issue #30: DeepSeek-V3's memory as its report describes it -- activations cached in FP8
// for the Linear's backward, the MoE SwiGLU's input cached in FP8 and its output recomputed
// (section 3.3.3), every RMSNorm and the MLA up-projections recomputed (3.2.3) -- in the
// paper memory of the deepseek-v3-2024 software, and what it lets the published run do:
// with MTP depth 1 (4.2) the stated layout fits without recomputing whole layers.
#include <gtest/gtest.h>

#include "deepseek_requests.h"
#include "model/block.h"
#include "plan/gpu_memory.h"
#include "plan/memory_model.h"
#include "plan/search.h"
#include "plan/software_profiles.h"
#include "plan/time_model.h"
#include "schedule/schedule.h"

namespace mt::plan {
namespace {

using testing::deepseek_v3_run;

PlanRequest deepseek_v3(int mtp_layers) {
  return deepseek_v3_run(mtp_layers);
}

Layout stated() {
  return testing::deepseek_v3_stated_layout();
}

PlanRequest without(PlanRequest r, bool fp8_cache, bool norm_up_proj) {
  r.hardware.fp8_activation_cache = fp8_cache;
  r.hardware.norm_up_proj_recompute = norm_up_proj;
  return r;
}

// The MoE layer's items per token (tp 1, no SP, bf16: e = 2): the experts' SwiGLU input
// (2 F) and dispatched row (h) per top-k row in FP8 (1 byte and a 4-byte scale per 128),
// the product not kept, where Korthikanti's items keep gate|up and product (3 F) and the
// row at 2 bytes; the shared expert's SwiGLU likewise.
TEST(PlanDeepSeekMemory, Fp8CacheKeepsTheMoeSwiGluInputInOneByteAndNotItsOutput) {
  const PlanRequest r = deepseek_v3(0);
  const Layout l = stated();
  const double tokens = 4096, h = 7168, F = 2048, k = 8, fp8 = 1 + 4.0 / 128;
  const double before = layer_activation_bytes(without(r, false, false), l, false, true);
  const double after = layer_activation_bytes(without(r, true, false), l, false, true);
  // Routed rows, shared expert, and the two Linear inputs outside (the norms' outputs).
  const double saved = k * ((2 * 3 * F + 2 * h) - fp8 * (2 * F + h)) + (2 * 3 * F - fp8 * 2 * F) +
                       2 * (2 * h - fp8 * h);
  EXPECT_NEAR(before - after, saved * tokens, 1e-6 * before);
}

// Recomputing the norms and the up-projections drops Q, K and V (3 h at 2 bytes: MLA planned
// as MHA) and the second norm's output; the up-projections' input is kept in the first
// norm output's place (MLA's latents, unknown to the planner, taken as h wide).
TEST(PlanDeepSeekMemory, NormAndUpProjectionRecomputationDropsQkvAndTheNormOutput) {
  const PlanRequest r = deepseek_v3(0);
  const Layout l = stated();
  const double tokens = 4096, h = 7168;
  const double before = layer_activation_bytes(without(r, false, false), l);
  const double after = layer_activation_bytes(without(r, false, true), l);
  EXPECT_NEAR(before - after, (2 * 3 * h + 2 * h) * tokens, 1e-6 * before);
}

// The recomputation is paid in the backward: the two norms and the q/kv projection per
// block, and the MoE SwiGLU's product; nothing more under full recomputation.
TEST(PlanDeepSeekMemory, TheRecomputedPiecesArePaidInTheBackward) {
  const PlanRequest r = deepseek_v3(0);
  Layout l = stated();
  const auto base = stage_costs(without(r, false, false), l);
  const auto norms = stage_costs(without(r, false, true), l);
  const auto both = stage_costs(r, l);
  EXPECT_EQ(base[3].recompute, 0);
  EXPECT_GT(norms[3].recompute, 0);
  EXPECT_GT(both[3].recompute, norms[3].recompute);
  EXPECT_NEAR(both[3].backward - base[3].backward, both[3].recompute, 1e-9 * both[3].backward);
  EXPECT_DOUBLE_EQ(both[3].forward, base[3].forward);
  l.recompute = Recompute::full;
  EXPECT_DOUBLE_EQ(stage_costs(r, l)[3].recompute,
                   stage_costs(without(r, false, false), l)[3].recompute);
}

// DualPipe-V's V puts the first and the last model chunk on stage 0: the head's logits are
// charged there (they were charged to the last stage's second chunk, the V's bottom, which
// holds many microbatches in flight).
TEST(PlanDeepSeekMemory, DualPipeVChargesTheHeadToStageZero) {
  const PlanRequest r = deepseek_v3(0);
  const Layout l = stated();
  const Schedule s = make_schedule(l.schedule, l.pp, microbatches(r, l), l.virtual_stages);
  PlanRequest small_vocab = r;
  small_vocab.model.vocab = 1024;
  const PlannedMemory big = software_memory(r, l, s), small = software_memory(small_vocab, l, s);
  // fp32 logits of one 4096-token microbatch: 2.1 GB; stage 0 holds one or two in flight.
  const double logits = 4.0 * 4096 * 129280;
  EXPECT_LT(big.activations - small.activations, 3 * logits);
}

// The published run with its MTP module (depth 1, report 4.2) at the stated layout: under
// Korthikanti's accounting only full recomputation fits; under the report's memory it fits
// without recomputing whole layers.
TEST(PlanDeepSeekMemory, TheStatedRunWithMtpFitsWithoutFullRecomputation) {
  const SearchResult with = search_layouts(deepseek_v3(1), 1);
  ASSERT_FALSE(with.candidates.empty());
  EXPECT_EQ(with.candidates[0].layout.recompute, Recompute::none);
  const SearchResult korthikanti = search_layouts(without(deepseek_v3(1), false, false), 1);
  ASSERT_FALSE(korthikanti.candidates.empty());
  EXPECT_EQ(korthikanti.candidates[0].layout.recompute, Recompute::full);
}

// The search's pruning bound (the slowest stage's compute alone) must stay below the step:
// with DualPipe-V's F&B pairs hiding the all-to-alls it once counted them as compute, so a
// search keeping one candidate dropped the faster ZeRO-1 layout that a search keeping three
// ranked first.
TEST(PlanDeepSeekMemory, ThePruningBoundStaysBelowTheStepUnderFbPairs) {
  const PlanRequest r = deepseek_v3(1);
  const Layout l = stated();
  const Schedule s = make_schedule(l.schedule, l.pp, microbatches(r, l), l.virtual_stages);
  const PredictedTime full = predict_time(r, l, s);
  ASSERT_FALSE(full.pruned);
  EXPECT_FALSE(predict_time(r, l, s, full.step_s).pruned);
  const auto one = search_layouts(r, 1).candidates.at(0),
             three = search_layouts(r, 3).candidates.at(0);
  EXPECT_EQ(one.layout.zero, three.layout.zero);
  EXPECT_DOUBLE_EQ(one.time.step_s, three.time.step_s);
}

}  // namespace
}  // namespace mt::plan
