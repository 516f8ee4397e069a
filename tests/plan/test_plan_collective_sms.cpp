// The SMs an overlapped data-parallel collective holds (issue #30, the Megatron-Core H100
// rows): NCCL runs one CTA per channel on an SM of its own (NVIDIA/nccl #689), so the
// computation a hidden reduce-scatter or parameter all-gather runs beside loses
// collective_sms / sms of its rate for as long as the collective runs.
#include <gtest/gtest.h>

#include <algorithm>

#include "plan/hardware_costs.h"
#include "plan/software_profiles.h"
#include "plan/time_model.h"

namespace mt::plan {
namespace {

// A 1B-class GPT, dp 16 under ZeRO 1 at micro-batch 1 (one microbatch per step).
PlanRequest request(double nic_busbw) {
  PlanRequest r;
  r.model.layers = 8;
  r.model.dim = 2048;
  r.model.heads = 16;
  r.model.seq = 2048;
  r.model.vocab = 32768;
  r.batch = 16;
  r.hardware = preset_profile("h100-80gb");
  apply_software(r.hardware, "megatron-core-2024");
  r.hardware.inter_busbw = nic_busbw;
  r.devices = 16;
  return r;
}

Layout zero1() {
  Layout l;
  l.dp = 16, l.zero = 1, l.micro_batch = 1, l.precision = Precision::bf16;
  return l;
}

TEST(PlanCollectiveSms, MegatronCoreHoldsNcclsSixteenSmsOfTheH100s132) {
  const PlanRequest r = request(45e9);
  EXPECT_EQ(r.hardware.collective_sms, 16);
  EXPECT_EQ(r.hardware.sms, 132);
}

// Each hidden second of the reduce-scatter (under the last backward) and of the parameter
// gather (under the first forward) costs 16/132 of a second; what is exposed costs nothing
// more (nothing computes beside it).
TEST(PlanCollectiveSms, HiddenCollectiveSecondsCostTheirShareOfTheSms) {
  for (const double nic : {45e9, 1e9}) {  // both hidden; both longer than their window
    const PlanRequest r = request(nic);
    PlanRequest free_sms = r;
    free_sms.hardware.collective_sms = 0;
    const Layout l = zero1();
    const StageCosts sc = stage_costs(r, l)[0];
    const GroupSpan dp = group_span(r.hardware, 16, 1);
    const double reduce =
        collective_seconds(r.hardware, Collective::reduce_scatter, sc.params * 4, dp);
    const double gather = collective_seconds(r.hardware, Collective::all_gather, sc.params * 2, dp);
    const double hidden = std::min(reduce, sc.backward + sc.weight) + std::min(gather, sc.forward);
    const PredictedTime with = predict_time(r, l, Schedule{});
    const PredictedTime without = predict_time(free_sms, l, Schedule{});
    EXPECT_NEAR(with.dp_sms_s, hidden * 16 / 132, 1e-12) << nic;
    EXPECT_GT(with.dp_sms_s, 5e-4) << nic;  // half a millisecond or more: no rounding error
    EXPECT_EQ(without.dp_sms_s, 0) << nic;
    EXPECT_NEAR(with.dp_exposed_s, without.dp_exposed_s + with.dp_sms_s, 1e-12) << nic;
    EXPECT_NEAR(with.step_s, without.step_s + with.dp_sms_s, 1e-12) << nic;
    if (nic == 1e9) {
      EXPECT_GT(reduce, sc.backward + sc.weight);  // the window bounds it
    }
  }
}

// A software whose reduction runs after the backward (megatron-lm-2022: no overlap) has
// nothing beside its collectives: no SM share, whatever the field says.
TEST(PlanCollectiveSms, NothingHiddenNothingLost) {
  PlanRequest r = request(45e9);
  apply_software(r.hardware, "megatron-lm-2022");
  EXPECT_EQ(r.hardware.collective_sms, 0);
  r.hardware.collective_sms = 16;
  Layout l = zero1();
  l.zero = 0;
  EXPECT_EQ(predict_time(r, l, Schedule{}).dp_sms_s, 0);
}

// Megatron-Core's tp overlaps under SP at tp 2 (every collective shorter than the GEMM it
// hides under): per block, the two column-parallel backwards' bulk all-gather and
// reduce-scatter and the two row-parallel forwards' pipelined reduce-scatters hide, six
// collectives of one all-gather's (or reduce-scatter's) time each, and each holds
// Transformer Engine's 16 userbuffers SMs; the ring exchanges (copy engines) hold none.
TEST(PlanCollectiveSms, TpOverlapsHoldTheUserbuffersSms) {
  PlanRequest r = request(45e9);
  r.model.dim = 4096;
  r.model.heads = 32;
  r.model.seq = 4096;
  r.batch = 4;
  r.devices = 2;
  EXPECT_EQ(r.hardware.tp_overlap_sms, 16);
  PlanRequest free_sms = r;
  free_sms.hardware.tp_overlap_sms = 0;
  Layout l;
  l.tp = 2, l.sequence_parallel = true, l.micro_batch = 4, l.precision = Precision::bf16;
  const GroupSpan tp = group_span(r.hardware, 2, 1);
  const double bytes = 4.0 * 4096 * 4096 * 2;  // (b s, h) in bf16
  const double half = (collective_seconds(r.hardware, Collective::all_gather, bytes, tp) +
                       collective_seconds(r.hardware, Collective::reduce_scatter, bytes, tp)) /
                      2;
  const PredictedTime with = predict_time(r, l, Schedule{});
  const PredictedTime without = predict_time(free_sms, l, Schedule{});
  const double lost = r.model.layers * 6 * half * 16 / 132;
  EXPECT_NEAR(with.tp_exposed_s - without.tp_exposed_s, lost, 1e-12);
  EXPECT_NEAR(with.step_s - without.step_s, lost, 1e-12);
  EXPECT_GT(lost, 1e-3 * with.step_s);
}

}  // namespace
}  // namespace mt::plan
