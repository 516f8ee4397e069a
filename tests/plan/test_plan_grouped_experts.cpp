// The experts as the engine runs them (model/expert_gemm.h): one grouped GEMM per matrix and
// pass over every local expert's rows, priced at the calibrated grouped rate
// (grouped_gemm_probe.cpp), not as one small GEMM per expert on the linears' path.
#include <gtest/gtest.h>

#include "plan/hardware_costs.h"
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

}  // namespace
}  // namespace mt::plan
