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

// tp 4 in 8 microbatches on 2 cores, with every collective step paying `latency`
// (oversubscribed and idle alike) and the collectives' bytes at `busbw` (0: the idle one).
double tp4_step(int cores, double latency, double busbw = 0) {
  Layout l;
  l.tp = 4, l.micro_batch = 1;
  PlanRequest r = llama_on(cores);
  r.hardware.oversubscribed_latency_s = latency;
  r.hardware.intra_latency_s = r.hardware.inter_latency_s = latency;
  if (busbw > 0) {
    r.hardware.oversubscribed_busbw = busbw;
    if (cores >= 4) r.hardware.intra_busbw = r.hardware.inter_busbw = busbw;
  }
  return predict_time(r, l, Schedule{}).step_s;
}

// A rank that waits on oversubscribed cores yields its core (comm/local/doorbell.h: no spin
// there) to a rank that computes: while the ranks' work over the cores is longer than the
// critical path (every rank at full speed, every wait on it), the waits cost the step
// nothing. Before, they were added to the shared work: tp 4 on 2 cores paid ~450
// collectives' latency the runs did not show.
TEST(PlanSharedCores, WaitsOnSharedCoresHideUnderTheOtherRanksWork) {
  const double latency = 2e-6;
  const double full_speed = tp4_step(4, 1e-12), waits = tp4_step(4, latency) - full_speed;
  ASSERT_GT(waits, 0);
  ASSERT_LT(full_speed + waits, 2 * full_speed);  // the critical path is the shorter
  EXPECT_NEAR(tp4_step(2, latency), tp4_step(2, 1e-12), 1e-6 * full_speed);
  // The work still time-shares: the latency-free step on two cores is twice the four-core one.
  EXPECT_NEAR(tp4_step(2, 1e-12), 2 * full_speed, 1e-3 * full_speed);
}

// Where the waits make the critical path longer than the work over the cores, the step is
// that path, as on dedicated cores: the latency (measured among busy ranks, the sharing in
// it) is neither stretched by the slowdown nor added on top of the shared work.
TEST(PlanSharedCores, WaitsLongerThanTheSharedWorkSetTheStep) {
  const double latency = 2e-3;
  const double full_speed = tp4_step(4, 1e-12), critical = tp4_step(4, latency);
  ASSERT_GT(critical, 2 * full_speed);
  EXPECT_NEAR(tp4_step(2, latency), critical, 1e-6 * critical);
}

// The same under pp: the tp collectives' waits of a pp 2 x tp 2 pipeline on 2 cores hide
// under the shared replay of the work while it is the longer; what remains is the sends'
// latency where the replay has no other stage to run meanwhile (a few latencies, not the
// hundreds of collective steps the old sum added).
TEST(PlanSharedCores, PipelineWaitsHideUnderTheSharedReplay) {
  Layout l;
  l.tp = 2, l.pp = 2, l.micro_batch = 1;  // 8 microbatches
  auto step = [&](int cores, double latency) {
    PlanRequest r = llama_on(cores);
    r.hardware.oversubscribed_latency_s = latency;
    r.hardware.intra_latency_s = r.hardware.inter_latency_s = latency;
    return predict_time(r, l, make_schedule("1f1b", l.pp, microbatches(r, l), 1)).step_s;
  };
  const double latency = 2e-6, free = step(2, 1e-12);
  ASSERT_GT(step(4, latency), step(4, 1e-12));
  ASSERT_LT(step(4, latency), free);  // the critical path is the shorter
  const double waits = step(4, latency) - step(4, 1e-12);
  EXPECT_LT(step(2, latency) - free, 0.05 * waits);
}

// The collectives' bytes at the oversubscribed busbw are a wait like the latency (the
// probe's figure is the wall they add to busy ranks sharing the cores): hidden under the
// work while it is the longer, the critical path where they make it longer; never the idle
// busbw's time stretched by the sharing.
TEST(PlanSharedCores, OversubscribedBusbwPricesCollectiveBytesAsAWait) {
  const double full_speed = tp4_step(4, 1e-12, 1e20);
  ASSERT_LT(tp4_step(4, 1e-12, 2e9), 2 * full_speed);
  EXPECT_NEAR(tp4_step(2, 1e-12, 2e9), tp4_step(2, 1e-12, 1e20), 1e-6 * full_speed);
  const double critical = tp4_step(4, 1e-12, 1e7);
  ASSERT_GT(critical, 2 * full_speed);
  EXPECT_NEAR(tp4_step(2, 1e-12, 1e7), critical, 1e-6 * critical);
  // Not measured (0): the bytes at the idle busbw are work, stretched by the sharing.
  Layout l;
  l.tp = 4, l.micro_batch = 1;
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

// A calibration whose oversubscribed probe read 0 (busy ranks sharing the cores paid
// nothing measurable per collective) measured the waits, not left them out: the critical
// path pays 0 per collective step, not the idle ping-pong's blocked-waiter wake-up. Hand
// figure: with every collective step's latency 0 the step is the latency-free one exactly,
// whatever the idle latency (66 us, the quiet 02:20 profile's). A profile without the probe
// still pays the idle latency (the 0 read as "not measured"). Mutation: reading a probed 0
// as "not measured" (time_model.cpp, oversubscription) fails the first expectation.
TEST(PlanSharedCores, AProbedZeroOversubscribedLatencyIsAMeasurement) {
  Layout l;
  l.tp = 4, l.micro_batch = 1;
  PlanRequest r = llama_on(2);
  r.hardware.oversubscribed_latency_s = 0;
  r.hardware.intra_latency_s = r.hardware.inter_latency_s = 0;
  const double free = predict_time(r, l, Schedule{}).step_s;
  r.hardware.intra_latency_s = r.hardware.inter_latency_s = 66e-6;
  const double unprobed = predict_time(r, l, Schedule{}).step_s;
  r.hardware.sources = {"oversubscribed_latency_s, oversubscribed_busbw: the busy loop"};
  EXPECT_DOUBLE_EQ(predict_time(r, l, Schedule{}).step_s, free);
  EXPECT_GT(unprobed, free);
}

// The replay with the profile's parallel efficiency: the costs are priced with every core
// computing, a stage that computes alone runs at one core's rate. Two stages of one
// microbatch never overlap: each runs all of its work at 1 / efficiency of its price.
TEST(PlanSharedCores, StagesThatComputeAloneRunAtOneCoresRate) {
  const Schedule s = make_schedule("gpipe", 2, 1, 1);
  const std::vector<OpCosts> costs(2, OpCosts{1.0, 2.0, 0.0, 0.0});
  EXPECT_NEAR(shared_cores_makespan(s, costs, 1, 2), 6.0, 1e-9);
  EXPECT_NEAR(shared_cores_makespan(s, costs, 1, 2, 1.0), 6.0, 1e-9);
  EXPECT_NEAR(shared_cores_makespan(s, costs, 1, 2, 0.8), 6.0 * 0.8, 1e-9);
  // Two-thread stages on two cores: alone, a stage already has every core busy.
  EXPECT_NEAR(shared_cores_makespan(s, costs, 2, 2, 0.8), 6.0, 1e-9);
}

// pp 2 on two cores (one rank each, not oversubscribed): a one-microbatch pipeline, whose
// stages never compute together, costs the same whatever the calibrated parallel
// efficiency; in four microbatches the stages overlap in the steady state only, so its
// pipeline lies between the efficiency-free one and that one slowed by 1 / efficiency.
// (Without per-call overheads: compute_rates leaves them unscaled, the replay speeds up
// every cost, a 0.25 us call's overhead a few percent too much on a lone stage.)
TEST(PlanSharedCores, LocalPipelineBubblesRunAtOneCoresRate) {
  PlanRequest r = testing::small_request(2);
  r.hardware.cores = 2;
  r.hardware.kernel_overhead_s = 0;
  r.hardware.intra_latency_s = r.hardware.inter_latency_s = 0;
  r.hardware.p2p_bw_intra = r.hardware.p2p_bw_inter = 1e30;
  PlanRequest slow = r;
  slow.hardware.parallel_efficiency = 0.8;
  Layout one;
  one.pp = 2, one.micro_batch = 8;
  const Schedule s1 = make_schedule("1f1b", 2, 1, 1);
  EXPECT_NEAR(predict_time(slow, one, s1).pipeline_s, predict_time(r, one, s1).pipeline_s, 1e-12);
  Layout four = one;
  four.micro_batch = 2;
  const Schedule s4 = make_schedule("1f1b", 2, 4, 1);
  const double free = predict_time(r, four, s4).pipeline_s;
  const double shared = predict_time(slow, four, s4).pipeline_s;
  EXPECT_GT(shared, free * 1.01);
  EXPECT_LT(shared, free / 0.8 * 0.99);
}

}  // namespace
}  // namespace mt::plan
