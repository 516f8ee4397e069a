// More rank threads than cores (time_model.h, Oversubscription): which threads share a
// stage's cores, and what of a collective the sharing stretches.
#include <gtest/gtest.h>

#include "plan/calibration_probes.h"
#include "plan/time_model.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

PlanRequest llama_on(int cores) {
  PlanRequest r = testing::small_request(4);
  r.model.arch = Arch::llama;
  r.model.kv_heads = 2;
  r.hardware.cores = cores;
  return r;
}

// A stage under cp is its dp x cp x tp ranks, all computing at once: cp 2 x pp 2 on two
// cores can never beat its work over the cores (each of the four ranks computes its stage's
// F, B and W for every microbatch). Counting only dp x tp threads per stage ran both
// stages' two cp ranks at full speed on two cores: half the work bound.
TEST(PlanSharedCores, CpRanksShareTheirStagesCores) {
  const PlanRequest r = llama_on(2);
  for (const char* schedule : {"1f1b", "dualpipev"}) {
    Layout l;
    l.cp = 2, l.pp = 2, l.micro_batch = 2;  // 4 microbatches
    l.schedule = schedule;
    l.virtual_stages = std::string(schedule) == "dualpipev" ? 2 : 1;
    const int m = microbatches(r, l);
    const PredictedTime p = predict_time(r, l, make_schedule(schedule, l.pp, m, l.virtual_stages));
    double work = 0;  // every rank's, full speed (the dedicated costs p keeps)
    for (const StageCosts& sc : p.stages) work += l.cp * m * (sc.forward + sc.backward + sc.weight);
    EXPECT_GE(p.step_s, work / r.hardware.cores) << schedule;
  }
}

// The oversubscribed latency is measured as what a collective adds to the wall of 2 x cores
// busy rank threads (calibration_probes.h): the sharing is in it already. So a latency L
// adds to a step on shared cores what it adds on dedicated ones, not L x the slowdown.
TEST(PlanSharedCores, OversubscribedLatencyIsAWaitNotStretchedBySharing) {
  Layout l;
  l.tp = 4, l.micro_batch = 1;  // 8 microbatches of tp collectives
  auto step = [&](int cores, double latency) {
    PlanRequest r = llama_on(cores);
    r.hardware.oversubscribed_latency_s = latency;
    r.hardware.intra_latency_s = r.hardware.inter_latency_s = latency;
    return predict_time(r, l, Schedule{}).step_s;
  };
  const double dedicated = step(4, 100e-6) - step(4, 1e-12);
  const double shared = step(2, 100e-6) - step(2, 1e-12);
  ASSERT_GT(dedicated, 0);
  EXPECT_NEAR(shared, dedicated, 1e-3 * dedicated);
  // The work still time-shares: the latency-free step on two cores is twice the four-core one.
  EXPECT_NEAR(step(2, 1e-12), 2 * step(4, 1e-12), 1e-3 * step(4, 1e-12));
}

// The oversubscribed busbw is measured as what an all-reduce's bytes add to the wall of
// 2 x cores busy rank threads (comm_probes.cpp): like the latency, a wait with the sharing
// in it. So on shared cores the bytes add what they add on dedicated cores at that busbw,
// not the idle busbw's time stretched by the slowdown (tp 4 on 2 cores: every member
// reduces its chunk in turn, a reader waits for its writer's slice).
TEST(PlanSharedCores, OversubscribedBusbwPricesCollectiveBytesAsAWait) {
  Layout l;
  l.tp = 4, l.micro_batch = 1;
  auto step = [&](int cores, double busbw) {
    PlanRequest r = llama_on(cores);
    r.hardware.oversubscribed_latency_s = r.hardware.intra_latency_s = r.hardware.inter_latency_s =
        1e-12;
    r.hardware.oversubscribed_busbw = busbw;
    if (cores >= 4) r.hardware.intra_busbw = r.hardware.inter_busbw = busbw;
    return predict_time(r, l, Schedule{}).step_s;
  };
  const double dedicated = step(4, 1e8) - step(4, 1e20);
  const double shared = step(2, 1e8) - step(2, 1e20);
  ASSERT_GT(dedicated, 0);
  EXPECT_NEAR(shared, dedicated, 1e-3 * dedicated);
  // Not measured (0): the bytes at the idle busbw are work, stretched by the sharing.
  PlanRequest r = llama_on(2);
  const double idle = predict_time(r, l, Schedule{}).step_s;
  r.hardware.oversubscribed_busbw = r.hardware.intra_busbw;
  EXPECT_LT(predict_time(r, l, Schedule{}).step_s, idle);
}

// The probe's figure: bus bandwidth from the added wall, 0 when the bytes added nothing
// measurable, and never above the idle busbw (ranks sharing cores cannot move bytes faster
// than idle ones; a tiny added time is the busy loops' noise).
TEST(PlanSharedCores, OversubscribedBusbwIsBoundedByTheIdleOne) {
  const double bytes = 128 * 1024, idle = 6e9;
  EXPECT_DOUBLE_EQ(oversubscribed_busbw_from(bytes, 1e-3, 4, idle), 1.5 * bytes / 1e-3);
  EXPECT_DOUBLE_EQ(oversubscribed_busbw_from(bytes, 1e-9, 4, idle), idle);
  EXPECT_EQ(oversubscribed_busbw_from(bytes, 0, 4, idle), 0);
  EXPECT_EQ(oversubscribed_busbw_from(bytes, -1e-5, 4, idle), 0);
}

}  // namespace
}  // namespace mt::plan
