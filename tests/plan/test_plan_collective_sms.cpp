// The SMs an overlapped data-parallel collective holds (issue #30, the Megatron-Core H100
// rows): NCCL runs one CTA per channel on an SM of its own (NVIDIA/nccl #689), so the
// computation a hidden reduce-scatter or parameter all-gather runs beside runs on the SMs
// left for as long as the collective runs: its GEMMs in the waves sms - collective_sms SMs
// need (held_sms_loss), the rest at the held share.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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

// The wave model with SMs held (gemm_seconds' 256x128 tiles, one per SM per wave): a GEMM
// whose tiles are a multiple of both SM counts loses exactly the held share; one that fits
// in one reduced wave loses nothing; one just past it (128 tiles: one wave on 132 SMs, two
// on 116) half; nothing without SMs held or without SMs.
TEST(PlanCollectiveSms, HeldSmsCostAGemmItsExtraWaves) {
  EXPECT_NEAR(held_sms_loss(132, 16, 256 * 116, 128 * 132), 16.0 / 132, 1e-15);
  EXPECT_EQ(held_sms_loss(132, 16, 2048, 1792), 0);  // 112 tiles
  EXPECT_NEAR(held_sms_loss(132, 16, 2048, 2048), 0.5, 1e-15);
  EXPECT_NEAR(held_sms_loss(132, 16, 2048, 2048, 2), 1 - 2.0 / 3, 1e-15);  // 256: 2 waves, 3
  EXPECT_EQ(held_sms_loss(132, 0, 2048, 2048), 0);
  EXPECT_EQ(held_sms_loss(0, 16, 2048, 2048), 0);
  EXPECT_EQ(held_sms_loss(132, 132, 2048, 2048), 1);
}

// Each hidden second of the reduce-scatter (under the last backward) and of the parameter
// gather (under the first forward) costs a share of a second: this model's GEMMs (2048
// rows; outputs 2048 to 8192 wide, 128 to 512 tiles) each need one more wave on 116 SMs, a
// quarter to a half of their time, more than the held 16/132; what is exposed costs nothing
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
    EXPECT_GT(with.dp_sms_s, hidden * 1.5 * 16 / 132) << nic;  // the extra waves
    EXPECT_LT(with.dp_sms_s, hidden * 0.5) << nic;             // no GEMM loses more
    EXPECT_GT(with.dp_sms_s, 5e-4) << nic;  // half a millisecond or more: no rounding error
    EXPECT_EQ(without.dp_sms_s, 0) << nic;
    EXPECT_NEAR(with.dp_exposed_s, without.dp_exposed_s + with.dp_sms_s, 1e-12) << nic;
    EXPECT_NEAR(with.step_s, without.step_s + with.dp_sms_s, 1e-12) << nic;
    if (nic == 1e9) {
      EXPECT_GT(reduce, sc.backward + sc.weight);  // the window bounds it
    }
  }
}

// On GEMMs of whole reduced waves the share is the held one: with 2 x 66 SMs held of 132
// (every GEMM's tile count is even, so 66 SMs run it in exactly twice the waves) each hidden
// second costs half a second, GEMMs and the rest alike.
TEST(PlanCollectiveSms, WholeWavesLoseTheHeldShare) {
  PlanRequest r = request(1e9);
  r.hardware.collective_sms = 66;
  const Layout l = zero1();
  const StageCosts sc = stage_costs(r, l)[0];
  const GroupSpan dp = group_span(r.hardware, 16, 1);
  const double reduce =
      collective_seconds(r.hardware, Collective::reduce_scatter, sc.params * 4, dp);
  const double gather = collective_seconds(r.hardware, Collective::all_gather, sc.params * 2, dp);
  const double hidden = std::min(reduce, sc.backward + sc.weight) + std::min(gather, sc.forward);
  EXPECT_NEAR(predict_time(r, l, Schedule{}).dp_sms_s, hidden * 0.5, 1e-12);
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
// Transformer Engine's 16 userbuffers SMs beside its GEMM, which runs in the waves 116 SMs
// need (held_sms_loss of its output: qkv's and fc1's input gradients and proj's and fc2's
// forwards N x h, qkv's weight gradient 3h/2 x h, fc1's 2h x h); the ring exchanges (copy
// engines) hold none.
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
  const double h = 4096, N = 4.0 * 4096, bytes = N * h * 2;  // (b s, h) in bf16
  const double half = (collective_seconds(r.hardware, Collective::all_gather, bytes, tp) +
                       collective_seconds(r.hardware, Collective::reduce_scatter, bytes, tp)) /
                      2;
  const PredictedTime with = predict_time(r, l, Schedule{});
  const PredictedTime without = predict_time(free_sms, l, Schedule{});
  const double share = 4 * held_sms_loss(132, 16, N, h) + held_sms_loss(132, 16, 1.5 * h, h) +
                       held_sms_loss(132, 16, 2 * h, h);
  const double lost = r.model.layers * half * share;
  EXPECT_NEAR(with.tp_exposed_s - without.tp_exposed_s, lost, 1e-12);
  EXPECT_NEAR(with.step_s - without.step_s, lost, 1e-12);
  EXPECT_GT(lost, 1e-3 * with.step_s);
  EXPECT_GT(std::abs(share - 6 * 16.0 / 132), 0.01);  // the waves differ from the held share
}

// The sourced SM counts of two more softwares: Megatron-LM 2022's async tp collectives are
// NCCL's, 24 ring channels within an 8-GPU A100 NVSwitch node (one CTA, one SM each), held
// beside the weight-gradient GEMM they hide under; MegaScale's nodes have eight 200G NICs,
// nccl #689's 16-SM case, held beside the compute its overlapped dp collectives hide under.
TEST(PlanCollectiveSms, SourcedCountsForTheAsyncTpAndMegaScalesDp) {
  PlanRequest r = request(23e9);
  r.hardware = preset_profile("a100-80gb");
  apply_software(r.hardware, "megatron-lm-2022");
  EXPECT_EQ(r.hardware.tp_overlap_sms, 24);
  EXPECT_EQ(r.hardware.collective_sms, 0);
  r.model.dim = 4096;
  r.model.heads = 32;
  r.batch = 8;
  r.devices = 8;
  Layout l;
  l.tp = 8, l.micro_batch = 4, l.precision = Precision::bf16;
  PlanRequest free_sms = r;
  free_sms.hardware.tp_overlap_sms = 0;
  const PredictedTime with = predict_time(r, l, Schedule{});
  const PredictedTime without = predict_time(free_sms, l, Schedule{});
  EXPECT_GT(with.tp_exposed_s - without.tp_exposed_s, 1e-3 * with.step_s);
  EXPECT_NEAR(with.step_s - without.step_s, with.tp_exposed_s - without.tp_exposed_s, 1e-12);

  PlanRequest ms = request(23e9);
  ms.hardware = preset_profile("a100-80gb");
  apply_software(ms.hardware, "megascale-2024");
  EXPECT_EQ(ms.hardware.collective_sms, 16);
  Layout z2 = zero1();
  z2.zero = 2;
  EXPECT_GT(predict_time(ms, z2, Schedule{}).dp_sms_s, 5e-4);
}

}  // namespace
}  // namespace mt::plan
