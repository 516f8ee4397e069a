// ZeRO 1/2's all-gather of the updated parameters (issue #30, the Megatron-Core H100 rows):
// priced at the bytes the software gathers (param_gather_bytes: bf16 model weights in
// Megatron's distributed optimizer) and, where it overlaps, hidden only under the next step's
// first microbatch's forward (Megatron-Core r0.8.0's forward pre-hooks dispatch the buckets'
// gathers one after another as the forward reaches them).
#include <gtest/gtest.h>

#include "plan/hardware_costs.h"
#include "plan/software_profiles.h"
#include "plan/time_model.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

// A 1B-class GPT, dp 16 under ZeRO 1 at micro-batch 1 (one microbatch per step).
PlanRequest request(double nic_busbw) {
  PlanRequest r = testing::mcore_small_gpt(16);
  r.hardware.inter_busbw = nic_busbw;
  r.hardware.collective_sms = 0;  // the SMs the hidden part holds: test_plan_collective_sms
  return r;
}

Layout zero1() {
  Layout l;
  l.dp = 16, l.zero = 1, l.micro_batch = 1, l.precision = Precision::bf16;
  return l;
}

// What the dp reduction exposes when the parameters' gather exposes `after`.
double expected_dp(const PlanRequest& r, const StageCosts& sc, double after) {
  const GroupSpan dp = group_span(r.hardware, 16, 1);
  const double reduce =
      collective_seconds(r.hardware, Collective::reduce_scatter, sc.params * 4, dp);
  return std::max(0.0, reduce - (sc.backward + sc.weight)) + after;
}

TEST(PlanParamGather, Bf16GatherHidesUnderTheFirstMicrobatchsForwardOnly) {
  for (const double nic : {1e9, 45e9}) {  // a gather longer than the forward, and shorter
    const PlanRequest r = request(nic);
    EXPECT_EQ(r.hardware.param_gather_bytes, 2);
    const Layout l = zero1();
    const StageCosts sc = stage_costs(r, l)[0];
    const GroupSpan dp = group_span(r.hardware, 16, 1);
    const double gather = collective_seconds(r.hardware, Collective::all_gather, sc.params * 2, dp);
    const PredictedTime t = predict_time(r, l, Schedule{});
    EXPECT_NEAR(t.dp_exposed_s, expected_dp(r, sc, std::max(0.0, gather - sc.forward)), 1e-12)
        << nic;
    if (nic == 1e9) {
      EXPECT_GT(gather, 2 * sc.forward);  // the slow link exposes most of it
    } else {
      EXPECT_LT(gather, sc.forward);  // the NIC's rate hides it all
    }
  }
  // Without the overlap the whole gather is exposed, at the gathered bytes: the fp32 bytes
  // of the gradients (the earlier model) cost twice the bf16 ones.
  PlanRequest r = request(1e9);
  r.hardware.param_gather_overlap = 0;
  const Layout l = zero1();
  const StageCosts sc = stage_costs(r, l)[0];
  const GroupSpan dp = group_span(r.hardware, 16, 1);
  const double bf16 = collective_seconds(r.hardware, Collective::all_gather, sc.params * 2, dp);
  EXPECT_NEAR(predict_time(r, l, Schedule{}).dp_exposed_s, expected_dp(r, sc, bf16), 1e-12);
  r.hardware.param_gather_bytes = 4;
  const double fp32 = collective_seconds(r.hardware, Collective::all_gather, sc.params * 4, dp);
  EXPECT_NEAR(predict_time(r, l, Schedule{}).dp_exposed_s, expected_dp(r, sc, fp32), 1e-12);
  EXPECT_GT(fp32, 1.9 * bf16);
}

// Megatron-Core's DDP streams each rank's WHOLE fp32 gradient buffer every step (zeroed,
// NaN-checked, scaled by 1/dp: 16 bytes per element), not only the 1/dp shard its distributed
// optimizer updates: the step pays it once, on the compute stream, beside the optimizer.
TEST(PlanParamGather, GradBufferPassesStreamTheWholeBufferNotTheShard) {
  PlanRequest r = request(45e9);
  EXPECT_EQ(r.hardware.grad_buffer_bytes, 16);
  EXPECT_EQ(r.hardware.optimizer_bytes, 38);  // its zeroing moved to the whole buffer
  const Layout l = zero1();
  const StageCosts sc = stage_costs(r, l)[0];
  const double with = predict_time(r, l, Schedule{}).optimizer_s;
  r.hardware.grad_buffer_bytes = 0;
  const double without = predict_time(r, l, Schedule{}).optimizer_s;
  const HardwareProfile& hw = r.hardware;
  EXPECT_NEAR(with - without, sc.params * 16 / hw.memory_bw + hw.kernel_overhead_s, 1e-12);
  // Sixteen times what the optimizer's own bytes on the dp 16 shard would be.
  EXPECT_GT(with - without, 15 * sc.params / 16 * 16 / hw.memory_bw);
  // Megatron-LM 2022 divides its whole fp32 buffer by dp before the all-reduce (8 bytes).
  HardwareProfile m = preset_profile("a100-80gb");
  apply_software(m, "megatron-lm-2022");
  EXPECT_EQ(m.grad_buffer_bytes, 8);
}

}  // namespace
}  // namespace mt::plan
