// The experts as the engine runs them (model/expert_gemm.h): one grouped GEMM per matrix and
// pass over every local expert's rows, priced at the calibrated grouped rate
// (grouped_gemm_probe.cpp), not as one small GEMM per expert on the linears' path.
#include <gtest/gtest.h>

#include "kernels/grouped_gemm.h"
#include "plan/hardware_costs.h"
#include "plan/search.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

HardwareProfile grouped_profile() {
  HardwareProfile h = testing::synthetic_local();
  h.moe_fwd_s = 1e-9, h.moe_bwd_s = 2e-9, h.moe_wgt_s = 3e-9;
  h.moe_fwd_s_bf16 = 4e-9, h.moe_bwd_s_bf16 = 5e-9, h.moe_wgt_s_bf16 = 6e-9;
  h.grouped_fwd_flops = 40e9, h.grouped_bwd_flops = 30e9, h.grouped_wgt_flops = 20e9;
  h.grouped_fwd_flops_bf16 = 90e9, h.grouped_bwd_flops_bf16 = 80e9;
  h.grouped_wgt_flops_bf16 = 70e9;
  // A step factor, to show the grouped figures do not carry it (the MoE rest does not).
  h.step_factor_fp32 = 1.25, h.step_factor_bf16 = 0.8;
  return h;
}

// Router (fp32 GEMMs) + 2 x 2 rows C H FLOPs per pass at the pass's grouped rate + the rest
// per hidden element: the same for any split of the rows over the experts.
TEST(PlanGroupedExperts, ExpertGemmsAreOneGroupedCallAtTheCalibratedRate) {
  const HardwareProfile h = grouped_profile();
  const double C = 64, H = 256, E = 4, tokens = 512;
  for (const bool bf16 : {false, true}) {
    // A grouped kernel runs the experts (portable: on any CPU; the defaults differ by CPU).
    const ScopedGroupedGemmPath path(bf16, GroupedGemmPath::portable);
    const ComputeRates R = compute_rates(h, bf16 ? Precision::bf16 : Precision::fp32, 1, 1),
                       R32 = compute_rates(h, Precision::fp32, 1, 1);
    const double rows = 1024, flops = 4 * rows * C * H;
    const double router_f = local_gemm_seconds(R32, tokens, E, C);
    const double router_w = local_gemm_seconds(R32, E, C, tokens) * R32.weight_grad_ratio;
    const double f_rate = bf16 ? 90e9 : 40e9, b_rate = bf16 ? 80e9 : 30e9,
                 w_rate = bf16 ? 70e9 : 20e9;
    const double rest_f = bf16 ? 4e-9 : 1e-9, rest_b = bf16 ? 5e-9 : 2e-9,
                 rest_w = bf16 ? 6e-9 : 3e-9;
    for (const std::vector<double>& split :
         {std::vector<double>{256, 256, 256, 256}, std::vector<double>{1, 0, 3, 1020}}) {
      const MoeCosts m = local_moe_costs(R, R32, split, tokens, E, C, H, bf16, 512);
      EXPECT_NEAR(m.forward, router_f + flops / f_rate + rows * H * rest_f, 1e-12) << bf16;
      EXPECT_NEAR(m.backward, router_f * R32.input_grad_ratio + flops / b_rate + rows * H * rest_b,
                  1e-12)
          << bf16;
      EXPECT_NEAR(m.weight, router_w + flops / w_rate + rows * H * rest_w, 1e-12) << bf16;
    }
  }
}

// A profile from before the grouped probe keeps the per-expert formula: an expert of one
// row costs a call's overhead there, and nothing but its FLOPs here.
TEST(PlanGroupedExperts, ProfilesWithoutTheGroupedFiguresKeepThePerExpertFormula) {
  HardwareProfile old = grouped_profile();
  old.grouped_fwd_flops = old.grouped_bwd_flops = old.grouped_wgt_flops = 0;
  const ComputeRates R = compute_rates(old, Precision::fp32, 1, 1);
  const MoeCosts even = local_moe_costs(R, R, {256, 256, 256, 256}, 512, 4, 64, 256, false, 512);
  const MoeCosts skewed = local_moe_costs(R, R, {1, 1, 1, 1021}, 512, 4, 64, 256, false, 512);
  EXPECT_GT(std::abs(skewed.forward - even.forward), 1e-9);
}

// fp32's experts run as oneDNN's sgemm once per expert (grouped_gemm_default_path's loop,
// kernels/grouped_gemm.cpp): the planner prices that loop per expert even where the profile
// has the grouped rates, and a grouped kernel at those rates.
TEST(PlanGroupedExperts, TheLoopIsPricedPerExpertWhateverTheProfileHas) {
  const HardwareProfile h = grouped_profile();
  HardwareProfile old = h;
  old.grouped_fwd_flops = old.grouped_bwd_flops = old.grouped_wgt_flops = 0;
  const ComputeRates R = compute_rates(h, Precision::fp32, 1, 1),
                     R_old = compute_rates(old, Precision::fp32, 1, 1);
  const std::vector<double> rows{1, 1, 1, 1021};
  const ScopedGroupedGemmPath loop(false, GroupedGemmPath::loop);
  const MoeCosts looped = local_moe_costs(R, R, rows, 512, 4, 64, 256, false, 512);
  const MoeCosts per_expert = local_moe_costs(R_old, R_old, rows, 512, 4, 64, 256, false, 512);
  EXPECT_DOUBLE_EQ(looped.forward, per_expert.forward);
  EXPECT_DOUBLE_EQ(looped.backward, per_expert.backward);
  EXPECT_DOUBLE_EQ(looped.weight, per_expert.weight);
  const ScopedGroupedGemmPath kernel(false, GroupedGemmPath::portable);
  EXPECT_GT(std::abs(local_moe_costs(R, R, rows, 512, 4, 64, 256, false, 512).forward -
                     per_expert.forward),
            1e-9);
}

// SwiGLU experts (llama, DeepSeek-style) run three C x F matrices, gate and up as one GEMM
// 2F wide (model/expert_mlp_fp32.h): 2 rows C (2F + F) FLOPs per pass, a third more than
// the GELU experts' two. The closed loop's DeepSeek-style layouts read 7-33% slower than
// predicted, relative to one rank, while they were priced as two matrices.
TEST(PlanGroupedExperts, SwigluExpertsPayTheirGateAndUpAsOneGemmTwiceAsWide) {
  const HardwareProfile h = grouped_profile();
  const double C = 64, H = 256, E = 4, tokens = 512, rows = 1024;
  const ScopedGroupedGemmPath path(false, GroupedGemmPath::portable);
  const ComputeRates R = compute_rates(h, Precision::fp32, 1, 1);
  const std::vector<double> split{256, 256, 256, 256};
  const MoeCosts gelu = local_moe_costs(R, R, split, tokens, E, C, H, false, 512);
  const MoeCosts swiglu = local_moe_costs(R, R, split, tokens, E, C, H, false, 512, 2 * H);
  EXPECT_NEAR(swiglu.forward - gelu.forward, 2 * rows * C * H / 40e9, 1e-12);
  EXPECT_NEAR(swiglu.weight - gelu.weight, 2 * rows * C * H / 20e9, 1e-12);
}

// The same through a whole plan: a llama MoE block's experts cost 2 N topk C 3F FLOPs per
// pass at the grouped rates (the difference between the calibrated rates and rates so high
// that the experts' GEMMs cost nothing).
TEST(PlanGroupedExperts, ALlamaMoePlanPricesItsExpertsAsThreeMatrices) {
  const ScopedGroupedGemmPath path(false, GroupedGemmPath::portable);
  PlanRequest r = testing::small_request(1);
  r.hardware = grouped_profile();
  r.model.arch = Arch::llama;
  r.model.experts = 4, r.model.topk = 2, r.model.expert_ffn_dim = 96;
  r.dp = r.tp = r.pp = r.ep = r.virtual_stages = 1;
  r.micro_batch = 8, r.zero = 0, r.recompute = Recompute::none, r.schedule = "1f1b";
  r.sequence_parallel = false;
  const double step = search_layouts(r, 1).candidates.at(0).time.step_s;
  r.hardware.grouped_fwd_flops = r.hardware.grouped_bwd_flops = r.hardware.grouped_wgt_flops = 1e20;
  const double free_gemms = search_layouts(r, 1).candidates.at(0).time.step_s;
  const double rows = 8.0 * 32 * 2, flops = 2 * rows * 64 * (2 * 96 + 96);
  EXPECT_NEAR(step - free_gemms, 4 * (flops / 40e9 + flops / 30e9 + flops / 20e9),
              1e-3 * (step - free_gemms));
}

}  // namespace
}  // namespace mt::plan
