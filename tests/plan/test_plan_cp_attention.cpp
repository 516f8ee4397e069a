// A cp rank's attention core (docs/planner.md, "The cp layouts"): s / cp queries over s keys
// at the one-worker rate times the calibrated cp factor (plan/cp_attention_factor.h); a
// profile without the factor keeps the whole sequence's FLOPs and --explain says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "plan/cp_attention_factor.h"
#include "plan/time_model.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

PlanRequest llama_request(double cp2, double cp4) {
  PlanRequest r = testing::small_request(2);
  r.model.arch = Arch::llama;
  r.model.kv_heads = 2;
  r.hardware.attention_fwd_flops = r.hardware.attention_bwd_flops = 10e9;
  r.hardware.cp2_attention_factor = cp2;
  r.hardware.cp4_attention_factor = cp4;
  // Fast sends: the ring's hops hide under every step, so only the core moves the costs.
  r.hardware.p2p_bw_intra = r.hardware.p2p_bw_inter = 1e15;
  return r;
}

// One microbatch's forward + backward of the cp 2 (ring) layout's stage.
double cp2_compute(const PlanRequest& r) {
  Layout l;
  l.cp = 2, l.micro_batch = 8;
  const StageCosts s = stage_costs(r, l)[0];
  EXPECT_EQ(s.cp_comm, 0);
  return s.forward + s.backward;
}

TEST(PlanCpAttention, TheFactorIsMeasuredAtTwoAndFourAndALineInLog2Between) {
  HardwareProfile hw;
  EXPECT_EQ(cp_attention_factor(hw, false, 1), 1);
  EXPECT_EQ(cp_attention_factor(hw, false, 2), 0);  // not calibrated
  hw.cp2_attention_factor = 1.25, hw.cp4_attention_factor = 1.75;
  EXPECT_EQ(cp_attention_factor(hw, false, 2), 1.25);
  EXPECT_EQ(cp_attention_factor(hw, false, 4), 1.75);
  EXPECT_GT(cp_attention_factor(hw, false, 3), 1.25);
  EXPECT_LT(cp_attention_factor(hw, false, 3), 1.75);
  EXPECT_DOUBLE_EQ(cp_attention_factor(hw, false, 8), 2.25);
  EXPECT_EQ(cp_attention_factor(hw, true, 2), 0);  // bf16 has its own
  hw.cp2_attention_factor = 1.5, hw.cp4_attention_factor = 1.25;
  EXPECT_EQ(cp_attention_factor(hw, false, 8), 1.25);  // never extrapolated downwards
}

TEST(PlanCpAttention, ACpRankPaysItsQueriesShareAtTheCalibratedFactor) {
  // Factor 2 at cp 2 is the whole sequence's FLOPs again: the old pricing, exactly.
  const double old = cp2_compute(llama_request(0, 0));
  EXPECT_DOUBLE_EQ(cp2_compute(llama_request(2, 3)), old);
  // Factor 1: half the core; each step of the factor adds the same half again.
  const double one = cp2_compute(llama_request(1, 1.5)), three = cp2_compute(llama_request(3, 4));
  EXPECT_LT(one, old);
  EXPECT_NEAR(three - old, old - one, 1e-9 * old);
  // The half core: 4 b s^2 q / 2 forward, twice that backward, per layer, at 10 GFLOP/s.
  const PlanRequest r = llama_request(1, 1.5);
  const double m = r.model.seq, half = 4.0 * 8 * m * m * r.model.dim / 2;
  EXPECT_NEAR((old - one) / (r.model.layers * 3 * half / 10e9), 1.0, 0.02);
  // cp 1 is untouched by the factors.
  Layout l;
  l.micro_batch = 8;
  EXPECT_DOUBLE_EQ(stage_costs(llama_request(1, 1.5), l)[0].forward,
                   stage_costs(llama_request(0, 0), l)[0].forward);
}

TEST(PlanCpAttention, ExplainSaysWhichPricingTheProfileGets) {
  const auto mentions = [](const PlanRequest& r, const std::string& text) {
    const std::vector<std::string> lines = time_assumptions(r);
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(mentions(llama_request(0, 0), "no cp attention factor"));
  EXPECT_TRUE(mentions(llama_request(1.25, 1.75), "cp 2 x1.25, cp 4 x1.75"));
}

// A bf16 run is priced at the bf16 factors (cp_attention_factor(hw, true, cp)); --explain
// named the fp32 ones whatever the run's precision until stop 45.
TEST(PlanCpAttention, ExplainNamesTheFactorsOfTheRunsPrecision) {
  const auto cp_line = [](const PlanRequest& r) {
    for (const std::string& l : time_assumptions(r))
      if (l.rfind("context parallel", 0) == 0) return l;
    return std::string();
  };
  PlanRequest r = llama_request(1.25, 1.75);
  r.hardware.cp2_attention_factor_bf16 = 1.375, r.hardware.cp4_attention_factor_bf16 = 1.875;
  EXPECT_NE(cp_line(r).find("fp32: cp 2 x1.25, cp 4 x1.75"), std::string::npos) << cp_line(r);
  r.precision = Precision::bf16;
  EXPECT_NE(cp_line(r).find("bf16: cp 2 x1.375, cp 4 x1.875"), std::string::npos) << cp_line(r);
  EXPECT_EQ(cp_line(r).find("1.25"), std::string::npos) << cp_line(r);
  // fp32 factors only: the bf16 run keeps the whole sequence's FLOPs, and says so.
  r.hardware.cp2_attention_factor_bf16 = r.hardware.cp4_attention_factor_bf16 = 0;
  EXPECT_EQ(cp_attention_factor(r.hardware, true, 2), 0);
  EXPECT_NE(cp_line(r).find("no cp attention factor for bf16"), std::string::npos) << cp_line(r);
}

}  // namespace
}  // namespace mt::plan
