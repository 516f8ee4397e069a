// Since stop 39 a 1-thread rank on AMX runs its bf16 linears (forward and input gradient,
// layers of up to kDenseBf16TilesMaxOut outputs) on the dense tile kernel with weights
// packed once per change (kernels/dense_gemm_bf16.h), and the planner priced them all on
// oneDNN's figures. It now prices the kernel that runs, by the engine's own rule
// (dense_bf16_team_on_tiles, dense_bf16_layer_on_tiles); profiles without the tile probe
// keep today's pricing and --explain says so.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "kernels/dense_gemm_bf16.h"
#include "plan/calibration_probes.h"
#include "plan/cost_model.h"
#include "plan/hardware_costs.h"
#include "plan/time_model.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

// Tile figures far from oneDNN's (peak_bf16 100 GFLOP/s in the synthetic profile), so that a
// term priced on the wrong kernel shows.
PlanRequest tiles_request(int threads) {
  PlanRequest r = testing::small_request(1);
  r.threads = threads;
  r.hardware.tiles_fwd_flops_bf16 = 7e9;
  r.hardware.tiles_bwd_flops_bf16 = 5e9;
  r.hardware.tiles_pack_s_bf16 = 3e-9;
  return r;
}

Layout bf16_one_rank() {
  Layout l;
  l.precision = Precision::bf16;
  l.micro_batch = 4;
  return l;
}

TEST(PlanDenseTiles, TheRanksThatRunTheTilesAreTheEnginesOnes) {
  const HardwareProfile h = tiles_request(1).hardware;
  for (const int threads : {1, 2, 4}) {
    const ComputeRates R = compute_rates(h, Precision::bf16, 1, threads);
    EXPECT_EQ(R.tiles_fwd > 0, dense_bf16_team_on_tiles(true, threads)) << threads;
    EXPECT_EQ(local_on_tiles(R, 1024), dense_bf16_team_on_tiles(true, threads)) << threads;
  }
  const ComputeRates R = compute_rates(h, Precision::bf16, 1, 1);
  EXPECT_TRUE(local_on_tiles(R, kDenseBf16TilesMaxOut));
  EXPECT_FALSE(local_on_tiles(R, kDenseBf16TilesMaxOut + 1));  // the head at real vocabularies
  EXPECT_EQ(compute_rates(h, Precision::fp32, 1, 1).tiles_fwd, 0);
}

// The projections' forward and input gradient at the tiles' rates, and the weights packed
// once per step at the pack cost instead of rounded.
TEST(PlanDenseTiles, OneThreadLinearsArePricedAtTheTileRatesAndPackedOncePerStep) {
  const PlanRequest r = tiles_request(1);
  const Layout l = bf16_one_rank();
  const CostContext c = make_context(r, l);
  const double N = c.N, h = c.h, qkv = c.w.q + 2 * c.w.kv;
  const double flops = 2 * N * qkv * h + 2 * N * h * c.w.q;
  const Passes p = attention_projections(c);
  EXPECT_NEAR(p.forward, flops / c.rates.tiles_fwd + 2 * c.rates.overhead_s, 1e-12);
  EXPECT_NEAR(p.backward, flops / c.rates.tiles_bwd + 2 * c.rates.overhead_s, 1e-12);
  // Every linear of this model (vocabulary 256) is on the tiles: nothing is rounded per step.
  const PredictedTime t = predict_time(r, l, Schedule{});
  ASSERT_EQ(t.stages.size(), 1u);
  EXPECT_DOUBLE_EQ(t.stages[0].tile_weights, t.stages[0].linear_weights);
  EXPECT_NEAR(t.bf16_weights_s, t.stages[0].linear_weights * c.rates.tiles_pack_s, 1e-12);
}

// A head wider than the tiles' limit stays on oneDNN and its weight is rounded, not packed.
TEST(PlanDenseTiles, AWideHeadStaysOnOneDnn) {
  PlanRequest r = tiles_request(1);
  r.model.vocab = kDenseBf16TilesMaxOut * 2;
  const PredictedTime t = predict_time(r, bf16_one_rank(), Schedule{});
  EXPECT_NEAR(t.stages[0].linear_weights - t.stages[0].tile_weights,
              double(r.model.vocab) * r.model.dim, 1.0);
}

// 2-thread ranks (oneDNN in the engine) and profiles without the probe: today's pricing,
// exactly; a 1-thread rank with the probe is priced differently.
TEST(PlanDenseTiles, TwoThreadRanksAndOldProfilesKeepOneDnnPricing) {
  for (const int threads : {1, 2}) {
    const PlanRequest with = tiles_request(threads);
    PlanRequest old = with;
    old.hardware.tiles_fwd_flops_bf16 = old.hardware.tiles_bwd_flops_bf16 = 0;
    old.hardware.tiles_pack_s_bf16 = 0;
    const double a = predict_time(with, bf16_one_rank(), Schedule{}).step_s;
    const double b = predict_time(old, bf16_one_rank(), Schedule{}).step_s;
    if (threads == 1)
      EXPECT_GT(a, 1.2 * b);  // 7 and 5 GFLOP/s against oneDNN's 100
    else
      EXPECT_DOUBLE_EQ(a, b);
  }
  Layout fp32 = bf16_one_rank();
  fp32.precision = Precision::fp32;
  PlanRequest old = tiles_request(1);
  old.hardware.tiles_fwd_flops_bf16 = old.hardware.tiles_bwd_flops_bf16 = 0;
  EXPECT_DOUBLE_EQ(predict_time(tiles_request(1), fp32, Schedule{}).step_s,
                   predict_time(old, fp32, Schedule{}).step_s);
}

TEST(PlanDenseTiles, ExplainSaysWhichKernelTheLinearsArePricedOn) {
  auto says = [](const PlanRequest& r, const std::string& text) {
    for (const std::string& line : time_assumptions(r))
      if (line.find(text) != std::string::npos) return true;
    return false;
  };
  PlanRequest old = tiles_request(1);
  old.hardware.tiles_fwd_flops_bf16 = old.hardware.tiles_bwd_flops_bf16 = 0;
  EXPECT_TRUE(says(old, "no dense tile probe"));
  EXPECT_TRUE(says(tiles_request(1), "dense AMX tiles"));
  EXPECT_FALSE(says(tiles_request(1), "no dense tile probe"));
}

// The probe runs the engine's tile kernel and stores measured figures (AMX machines only).
TEST(PlanDenseTiles, TheProbeStoresMeasuredFigures) {
  if (!dense_bf16_path_available(DenseBf16Path::amx))
    GTEST_SKIP() << "no AMX on this CPU: the probe times the dense AMX tile kernels";
  HardwareProfile h = testing::synthetic_local();
  std::ostringstream log;
  measure_bf16_tiles(h, ProbeRun{0.06, 1, log});
  EXPECT_GT(h.tiles_fwd_flops_bf16, 1e9);
  EXPECT_GT(h.tiles_bwd_flops_bf16, 1e9);
  EXPECT_GT(h.tiles_pack_s_bf16, 0);
  EXPECT_LT(h.tiles_pack_s_bf16, 1e-6);
}

}  // namespace
}  // namespace mt::plan

namespace mt::plan {
namespace {

// The bf16 experts on the grouped AMX GEMMs are rounded and packed in both layouts once per
// step (model/expert_gemm.cpp Bf16ExpertWeights::packed, the same grouped_bf16_pack), in any
// team; the MoE layer probe reuses one weight version, so its rest never held that cost.
TEST(PlanDenseTiles, Bf16ExpertsArePackedOncePerStep) {
  for (const int threads : {1, 2}) {
    PlanRequest r = tiles_request(threads);
    r.model.experts = 4;
    r.hardware.grouped_fwd_flops_bf16 = r.hardware.grouped_bwd_flops_bf16 =
        r.hardware.grouped_wgt_flops_bf16 = 50e9;
    const PredictedTime t = predict_time(r, bf16_one_rank(), Schedule{});
    const ComputeRates R = compute_rates(r.hardware, Precision::bf16, 1, threads);
    ASSERT_GT(R.expert_pack_s, 0) << threads;
    const StageCosts& sc = t.stages[0];
    EXPECT_NEAR(sc.expert_pack_weights, 4.0 * r.model.layers * 2 * 4 * r.model.dim * r.model.dim,
                1.0)
        << threads;
    EXPECT_NEAR(
        t.bf16_weights_s,
        local_convert_seconds(R, sc.linear_weights - sc.tile_weights - sc.expert_pack_weights,
                              4 * sc.blocks + 1) +
            sc.tile_weights * R.tiles_pack_s + sc.expert_pack_weights * R.expert_pack_s,
        1e-12)
        << threads;
  }
}

}  // namespace
}  // namespace mt::plan
