// The tp collectives priced at the busy tp probe's figures (hardware_profile.h
// busy_tp_*, hardware_costs.h tp_collective_seconds): two rank threads that compute between
// collectives and all-reduce their 1 MiB tp output, not the idle 16 MiB busbw and 4-byte
// latency, which priced tp2 + SP 14-20% slow in all five stored quiet loops.
#include <gtest/gtest.h>

#include "plan/calibration_probes.h"
#include "plan/hardware_costs.h"
#include "plan/hardware_profile.h"
#include "plan/time_model.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

PlanRequest on_cores(int devices, int cores) {
  PlanRequest r = testing::small_request(devices);
  r.hardware.cores = cores;
  return r;
}

PredictedTime predict(const PlanRequest& r, const Layout& l) {
  return predict_time(r, l, Schedule{});
}

Layout tp2(bool sp) {
  Layout l;
  l.tp = 2, l.micro_batch = 2, l.sequence_parallel = sp;
  return l;
}

// The busy figures set on a profile whose idle figures differ from them by far (4x the
// busbw, a fifth of the latency): the tp collectives must cost what the idle model costs at
// the busy figures, whatever the idle ones are.
TEST(PlanBusyTp, TpCollectivesArePricedAtTheBusyProbesFigures) {
  for (bool sp : {false, true}) {
    PlanRequest busy = on_cores(2, 2);
    busy.hardware.busy_tp_busbw = 4 * busy.hardware.intra_busbw;
    busy.hardware.busy_tp_latency_s = busy.hardware.intra_latency_s / 5;
    PlanRequest same = on_cores(2, 2);  // the old model given the busy figures as its idle ones
    same.hardware.intra_busbw = same.hardware.inter_busbw = busy.hardware.busy_tp_busbw;
    same.hardware.intra_latency_s = same.hardware.inter_latency_s = busy.hardware.busy_tp_latency_s;
    const PlanRequest idle = on_cores(2, 2);
    const double b = predict(busy, tp2(sp)).tp_exposed_s, s = predict(same, tp2(sp)).tp_exposed_s;
    EXPECT_GT(b, 0) << sp;
    EXPECT_NEAR(b, s, 1e-12 * s) << sp;
    EXPECT_LT(b, 0.5 * predict(idle, tp2(sp)).tp_exposed_s) << sp;
    EXPECT_LT(predict(busy, tp2(sp)).step_s, predict(idle, tp2(sp)).step_s) << sp;
  }
}

// A profile calibrated before the probe (busy_tp_busbw 0, as every stored profile) keeps
// the idle pricing: its replays reproduce their logged predictions.
TEST(PlanBusyTp, AProfileWithoutTheProbeKeepsTheIdlePricing) {
  PlanRequest r = on_cores(2, 2);
  r.hardware.busy_tp_latency_s = 1e-3;  // a latency alone is no measurement
  const PlanRequest idle = on_cores(2, 2);
  EXPECT_DOUBLE_EQ(predict(r, tp2(true)).step_s, predict(idle, tp2(true)).step_s);
  EXPECT_DOUBLE_EQ(
      tp_collective_seconds(r.hardware, Collective::all_reduce, 1 << 20, GroupSpan{2, 2, 1}),
      collective_seconds(r.hardware, Collective::all_reduce, 1 << 20, GroupSpan{2, 2, 1}));
}

// Only the tp groups: the probe measured the tp activations' collectives, not the
// gradients' all-reduce after the backward (dp) or the experts' exchange.
TEST(PlanBusyTp, OtherGroupsKeepTheirPricing) {
  PlanRequest busy = on_cores(2, 2);
  busy.hardware.busy_tp_busbw = 4 * busy.hardware.intra_busbw;
  busy.hardware.busy_tp_latency_s = 0;
  const PlanRequest idle = on_cores(2, 2);
  Layout dp2;
  dp2.dp = 2, dp2.micro_batch = 4;
  EXPECT_DOUBLE_EQ(predict(busy, dp2).step_s, predict(idle, dp2).step_s);
}

// More rank threads than cores: the tp collectives pay the oversubscribed figures (measured
// among 2 x cores busy ranks) like every other collective, not the two-rank busy ones.
TEST(PlanBusyTp, MoreRankThreadsThanCoresKeepTheOversubscribedPricing) {
  PlanRequest busy = on_cores(4, 2);
  busy.hardware.oversubscribed_latency_s = 50e-6;
  busy.hardware.oversubscribed_busbw = 1e9;
  PlanRequest plain = busy;
  busy.hardware.busy_tp_busbw = 50e9;
  busy.hardware.busy_tp_latency_s = 1e-6;
  Layout tp4;
  tp4.tp = 4, tp4.micro_batch = 2, tp4.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(predict(busy, tp4).step_s, predict(plain, tp4).step_s);
}

// The probe measured the local backend's rank threads: an MPI plan of the same profile
// prices its tp collectives at the MPI figures.
TEST(PlanBusyTp, TheMpiBackendDropsTheLocalProbe) {
  HardwareProfile h = testing::synthetic_local();
  h.mpi_busbw = 2e9, h.mpi_latency_s = 20e-6, h.mpi_p2p_bw = 2e9;
  h.busy_tp_busbw = 50e9, h.busy_tp_latency_s = 1e-6;
  const HardwareProfile m = for_backend(h, "mpi");
  EXPECT_EQ(m.busy_tp_busbw, 0);
  EXPECT_DOUBLE_EQ(tp_collective_seconds(m, Collective::all_reduce, 1 << 20, GroupSpan{2, 2, 1}),
                   collective_seconds(m, Collective::all_reduce, 1 << 20, GroupSpan{2, 2, 1}));
}

// The probe's busbw from what the 1 MiB payload added beyond a 4-byte all-reduce among two
// busy ranks: 2 (n-1)/n bytes / seconds, unbounded by the idle 16 MiB figure (an in-cache
// 1 MiB reduction may well beat it), 0 when the payload added nothing measurable.
TEST(PlanBusyTp, TheProbesBusbwRule) {
  const double bytes = 1 << 20;
  EXPECT_DOUBLE_EQ(busy_tp_busbw_from(bytes, 1e-4, 2), bytes / 1e-4);
  EXPECT_EQ(busy_tp_busbw_from(bytes, 0, 2), 0);
  EXPECT_EQ(busy_tp_busbw_from(bytes, -1e-6, 2), 0);
}

}  // namespace
}  // namespace mt::plan
