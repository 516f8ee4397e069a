// The local time model's bf16 and tensor-parallel terms against the engine's own calls:
// the elements a bf16 step rounds to bf16 (model/block.cpp, lm_head.cpp,
// row_parallel_linear.cpp, bf16_weight.h) and the collectives the tp linears issue.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/calibrate.h"
#include "plan/hardware_costs.h"
#include "plan/time_model.h"
#include "plan_test_util.h"
#include "schedule/schedule.h"
#include "schedule/schedule_simulator.h"

namespace mt::plan {
namespace {

using testing::small_request;

double step(const PlanRequest& r, const Layout& l) {
  const Schedule none;
  return predict_time(r, l, none).step_s;
}

// Raising the seconds per rounded element by d raises the step by d x the elements the
// engine rounds per step: per block and microbatch 2 N h + 5 N h (forward: ln1_out, ln2_out;
// att_out, fc_out), 2 N h + 7 N h (backward: the two row-parallel output gradients; d_fc,
// d_qkv), 2 N h (the weight pass rounds those output gradients again); the head N h
// (ln_f's output) and 2 N V (dlogits for B and W); the weight copies 12 h^2 per block and
// V h for the tied head, once per step.
TEST(PlanLocal, Bf16RoundsWhatTheEngineRounds) {
  PlanRequest r = small_request(1);
  Layout l;
  l.micro_batch = 4;  // two microbatches
  l.precision = Precision::bf16;
  const double before = step(r, l);
  const double d = 1e-9;
  r.hardware.bf16_convert_s += d;
  const double after = step(r, l);
  const double L = r.model.layers, h = r.model.dim, V = r.model.vocab;
  const double N = double(l.micro_batch) * r.model.seq, m = r.batch / l.micro_batch;
  const double per_microbatch = L * (7 + 9 + 2) * N * h + N * h + 2 * N * V;
  const double elements = m * per_microbatch + L * 12 * h * h + V * h;
  EXPECT_NEAR((after - before) / d, elements, elements * 1e-6);
  // fp32 rounds nothing.
  Layout f = l;
  f.precision = Precision::fp32;
  const double f0 = step(r, f);
  r.hardware.bf16_convert_s += d;
  EXPECT_EQ(step(r, f), f0);
}

// bf16 runs the linears and the MoE experts on the bf16 GEMM path: a faster bf16 peak makes
// the step faster; the MoE router stays an fp32 GEMM.
TEST(PlanLocal, Bf16LinearsAndExpertsUseTheBf16GemmTheRouterFp32) {
  PlanRequest r = small_request(1);
  Layout l;
  l.micro_batch = 8;
  l.precision = Precision::bf16;
  const double slow = step(r, l);
  r.hardware.peak_bf16 *= 2;
  EXPECT_LT(step(r, l), slow);
  PlanRequest moe = small_request(1);
  moe.model.experts = 4;
  const double a = stage_costs(moe, l)[0].forward;
  moe.hardware.peak_fp32 *= 2;  // the router's rate
  const double b = stage_costs(moe, l)[0].forward;
  moe.hardware.peak_bf16 *= 2;  // the experts' (and attention linears') rate
  const double c = stage_costs(moe, l)[0].forward;
  EXPECT_LT(b, a);
  EXPECT_LT(c, b);
}

// The calibrated reference step scales every compute cost of its precision (a one-rank step
// with no communication: exactly the factor), and only that precision's.
TEST(PlanLocal, StepFactorScalesTheComputeOfItsPrecision) {
  PlanRequest r = small_request(1);
  Layout l;
  l.micro_batch = 8;
  const double fp32 = step(r, l);
  Layout b = l;
  b.precision = Precision::bf16;
  const double bf16 = step(r, b);
  r.hardware.step_factor_fp32 = 1.25;
  // Kernel overheads are per call, not scaled: the step grows by a little less than 25%.
  EXPECT_GT(step(r, l), 1.2 * fp32);
  EXPECT_LE(step(r, l), 1.25 * fp32 * (1 + 1e-12));
  EXPECT_EQ(step(r, b), bf16);
}

// The calibrated per-microbatch cost: each microbatch pays it once per linear weight element
// on the rank (12 h^2 per block, V h for the tied head), unscaled by the step factor (both
// are solved from the same real steps); fp32 and bf16 keep their own figure.
TEST(PlanLocal, MicrobatchCostIsPerMicrobatchAndWeight) {
  for (const char* precision : {"fp32", "bf16"}) {
    const bool bf16 = std::string(precision) == "bf16";
    PlanRequest r = small_request(1);
    r.hardware.step_factor_fp32 = r.hardware.step_factor_bf16 = 1.5;
    Layout l;
    l.micro_batch = 2;  // four microbatches
    l.precision = precision_of(precision);
    const double before = step(r, l);
    const double d = 1e-9;
    (bf16 ? r.hardware.microbatch_weight_s_bf16 : r.hardware.microbatch_weight_s) = d;
    const double h = r.model.dim, weights = r.model.layers * 12 * h * h + r.model.vocab * h;
    EXPECT_NEAR((step(r, l) - before) / d, 4 * weights, 4 * weights * 1e-6) << precision;
    // The other precision's figure does not apply.
    (bf16 ? r.hardware.microbatch_weight_s : r.hardware.microbatch_weight_s_bf16) = 1e-6;
    EXPECT_NEAR((step(r, l) - before) / d, 4 * weights, 4 * weights * 1e-6) << precision;
    // One microbatch pays it once.
    Layout one = l;
    one.micro_batch = 8;
    const double d1 = step(r, one);
    (bf16 ? r.hardware.microbatch_weight_s_bf16 : r.hardware.microbatch_weight_s) = 2 * d;
    EXPECT_NEAR((step(r, one) - d1) / d, weights, weights * 1e-6) << precision;
  }
}

// The step factor scales the kernels calibrated at their best, not the figures measured
// in a real step or a whole cold layer (the per-microbatch cost, the MoE rest): scaling
// the MoE rest again predicted one-rank MoE steps 25-28% slow.
TEST(PlanLocal, StepFactorLeavesTheMeasuredWholeLayerFiguresAlone) {
  HardwareProfile h = testing::synthetic_local();
  h.moe_fwd_s = 1e-9, h.moe_bwd_s = 2e-9, h.moe_wgt_s = 3e-9, h.microbatch_weight_s = 4e-9;
  const ComputeRates plain = compute_rates(h, Precision::fp32, 1, 1);
  h.step_factor_fp32 = 1.5;
  const ComputeRates stepped = compute_rates(h, Precision::fp32, 1, 1);
  EXPECT_NEAR(stepped.peak, plain.peak / 1.5, plain.peak * 1e-12);
  EXPECT_DOUBLE_EQ(stepped.moe_fwd_s, plain.moe_fwd_s);
  EXPECT_DOUBLE_EQ(stepped.moe_bwd_s, plain.moe_bwd_s);
  EXPECT_DOUBLE_EQ(stepped.moe_wgt_s, plain.moe_wgt_s);
  EXPECT_DOUBLE_EQ(stepped.microbatch_weight_s, plain.microbatch_weight_s);
}

// Locally tp communicates as the linears do: without SP two all-reduces of (N, h) forward
// and two backward per block; with SP two all-gathers + two reduce-scatters in each of
// forward and backward and four all-gathers in the weight pass (bf16: the linears' gathers
// move 2-byte elements).
TEST(PlanLocal, TensorParallelCommunicationIsTheLinears) {
  for (const char* precision : {"fp32", "bf16"}) {
    for (bool sp : {false, true}) {
      PlanRequest r = small_request(2);
      Layout l;
      l.tp = 2, l.micro_batch = 8, l.sequence_parallel = sp, l.precision = precision_of(precision);
      const std::vector<StageCosts> s = stage_costs(r, l);
      const double N = 8.0 * r.model.seq, h = r.model.dim;
      const GroupSpan g = group_span(r.hardware, 2, 1);
      const double ge = std::string(precision) == "bf16" ? 2 : 4;
      const double ar = collective_seconds(r.hardware, Collective::all_reduce, N * h * 4, g);
      const double ag = collective_seconds(r.hardware, Collective::all_gather, N * h * ge, g);
      const double rs = collective_seconds(r.hardware, Collective::reduce_scatter, N * h * 4, g);
      const double small = 3 * collective_seconds(r.hardware, Collective::all_reduce, N * 4, g);
      // Blocks, the embedding (SP: reduce-scatter, all-gather back, fp32), the head's input
      // and its gradient, the loss's statistics.
      const double ag32 = collective_seconds(r.hardware, Collective::all_gather, N * h * 4, g);
      const double blocks = r.model.layers * (sp ? 4 * ag + 4 * rs + 4 * ag : 4 * ar);
      const double embedding = sp ? rs + ag32 : ar;
      const double head = sp ? ag + rs : ar;
      EXPECT_NEAR(s[0].tp_comm, blocks + embedding + head + small, 1e-12)
          << precision << " sp " << sp;
    }
  }
}

// Four ranks on two cores: a rank that waits leaves its core to another. A pipeline of one
// microbatch runs its stages one at a time at full speed (its pipeline time is the
// full-speed makespan; the optimizer after it runs on all four ranks at once, at half
// speed), four data-parallel ranks all compute at once (twice the four-core step).
TEST(PlanLocal, RanksBeyondTheCoresTimeShareByWorkAndSpan) {
  PlanRequest r = small_request(4);
  // Work only: a collective's latency is a wait, not shared (test_plan_shared_cores.cpp).
  r.hardware.intra_latency_s = r.hardware.inter_latency_s = 0;
  PlanRequest wide = r;
  r.hardware.cores = 2;
  wide.hardware.cores = 4;
  Layout pp;
  pp.pp = 4, pp.micro_batch = 8;  // one microbatch
  const Schedule s = make_schedule("1f1b", 4, 1, 1);
  const PredictedTime two_pp = predict_time(r, pp, s), four_pp = predict_time(wide, pp, s);
  EXPECT_NEAR(two_pp.step_s, four_pp.pipeline_s + 2 * (four_pp.step_s - four_pp.pipeline_s), 1e-12);
  Layout dp;
  dp.dp = 4, dp.micro_batch = 2;
  const PredictedTime two = predict_time(r, dp, Schedule{}),
                      four = predict_time(wide, dp, Schedule{});
  EXPECT_NEAR(two.step_s, 2 * four.step_s, 1e-12);
}

// The shared-cores replay: with a core per stage thread it is the simulator's makespan; with
// one core for one-thread stages it is all the work (a deadlock-free schedule always has a
// stage that can compute, so the core never idles); in between, warm-up and cool-down
// (fewer computing stages than cores) cost wall time that the work bound does not show.
TEST(PlanLocal, SharedCoresReplayIsTheSimulatorOrTheWork) {
  for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
    const Schedule s = make_schedule(name, 4, 6, 1);
    std::vector<OpCosts> costs;
    double work = 0;
    for (int st = 0; st < 4; ++st) {
      costs.push_back({1.0 + 0.1 * st, 2.0, 0.5 + 0.2 * st, 0.0});
      for (const Action& a : s.actions[size_t(st)]) work += action_cost(s, a.kind, costs.back());
    }
    EXPECT_NEAR(shared_cores_makespan(s, costs, 1, 4), simulate_schedule(s, costs).makespan, 1e-9)
        << name;
    EXPECT_NEAR(shared_cores_makespan(s, costs, 1, 1), work, 1e-9) << name;
    const double two = shared_cores_makespan(s, costs, 1, 2);
    EXPECT_GT(two, work / 2 + 1e-3) << name;
    EXPECT_GE(two, simulate_schedule(s, costs).makespan - 1e-9) << name;
  }
}

// The tie-break the work bound lacked: four pipeline stages on two cores, costs linear in the
// microbatch (no per-call overheads, no small-GEMM penalty, no latency) so that every
// microbatch count does the same work; more, smaller microbatches shorten the warm-up and
// cool-down in which fewer stages than cores compute, and rank first.
TEST(PlanLocal, OversubscribedPipelinesRankByTheirSharedCoresSpan) {
  PlanRequest r = small_request(4);
  r.hardware.cores = 2;
  r.hardware.kernel_overhead_s = 0;
  r.hardware.gemm_half_dim = 0;
  r.hardware.intra_latency_s = r.hardware.inter_latency_s = 0;
  r.hardware.p2p_bw_intra = r.hardware.p2p_bw_inter = 1e30;
  double last = 1e30;
  for (int mb : {8, 4, 2, 1}) {
    Layout l;
    l.pp = 4, l.micro_batch = mb;
    const PredictedTime p = predict_time(r, l, make_schedule("1f1b", 4, 8 / mb, 1));
    EXPECT_LT(p.step_s, last * (1 - 1e-6)) << "micro-batch " << mb;
    last = p.step_s;
  }
}

// The MoE layer's local cost is its parts: the fp32 router GEMMs, each expert's GEMMs over its
// rows (bf16: over the layer's row chunks; the last one, under 64 rows, split into
// matmul_bf16's row pieces for the forward and input-gradient GEMMs and padded to 64 rows
// for the weight-gradient GEMMs) and the calibrated rest per hidden element.
TEST(PlanLocal, MoeCostsAreTheRouterTheExpertGemmsAndTheCalibratedRest) {
  HardwareProfile h = testing::synthetic_local();
  h.moe_fwd_s = 1e-9, h.moe_bwd_s = 2e-9, h.moe_wgt_s = 3e-9;
  h.moe_fwd_s_bf16 = 4e-9, h.moe_bwd_s_bf16 = 5e-9, h.moe_wgt_s_bf16 = 6e-9;
  const double C = 64, H = 256, E = 4, tokens = 512;
  const std::vector<double> rows = {300, 0, 130, 594};
  for (const char* precision : {"fp32", "bf16"}) {
    const bool bf16 = std::string(precision) == "bf16";
    const ComputeRates R = compute_rates(h, precision_of(precision), 1, 1),
                       R32 = compute_rates(h, Precision::fp32, 1, 1);
    const MoeCosts m = local_moe_costs(R, R32, rows, tokens, E, C, H, bf16, 512);
    auto g = [&](const ComputeRates& x, double a, double b, double c) {
      return local_gemm_seconds(x, a, b, c);
    };
    double f = g(R32, tokens, E, C), b = f * R32.input_grad_ratio,
           w = g(R32, E, C, tokens) * R32.weight_grad_ratio;
    // fp32: one call per expert with rows. bf16, forward and input gradient: 300 = 256 +
    // (44 = 32 + 8 + 4); 130 = 128 + 2; 594 = 512 + 64 + (18 = 16 + 2). Weight gradient:
    // 300 = 256 + (44 -> 64); 130 = 128 + (2 -> 64); 594 = 512 + 64 + (18 -> 64).
    using Calls = std::vector<std::vector<double>>;
    const Calls row_calls = bf16 ? Calls{{256, 32, 8, 4}, {}, {128, 2}, {512, 64, 16, 2}}
                                 : Calls{{300}, {}, {130}, {594}};
    const Calls weight_calls =
        bf16 ? Calls{{256, 64}, {}, {128, 64}, {512, 64, 64}} : Calls{{300}, {}, {130}, {594}};
    for (const auto& expert : row_calls)
      for (const double r : expert) {
        const double fwd = g(R, r, H, C) + g(R, r, C, H);
        f += fwd, b += fwd * R.input_grad_ratio;
      }
    for (const auto& expert : weight_calls)
      for (const double r : expert) w += (g(R, H, C, r) + g(R, C, H, r)) * R.weight_grad_ratio;
    const double elems = (300 + 130 + 594) * H;
    f += elems * (bf16 ? 4e-9 : 1e-9), b += elems * (bf16 ? 5e-9 : 2e-9),
        w += elems * (bf16 ? 6e-9 : 3e-9);
    EXPECT_NEAR(m.forward, f, 1e-15) << precision;
    EXPECT_NEAR(m.backward, b, 1e-15) << precision;
    EXPECT_NEAR(m.weight, w, 1e-15) << precision;
  }
}

// In a plan: every MoE block of every microbatch adds the calibrated rest over N topk rows x
// 4h (the derivative is exact); with expert parallelism over the busiest rank's rows, the
// expected maximum of ep normal loads from the calibrated spread, capped at all the rows a
// rank can receive.
TEST(PlanLocal, ExpertParallelWaitsForTheBusiestRank) {
  EXPECT_NEAR(expected_max_normal(2), 1 / std::sqrt(M_PI), 1e-6);
  EXPECT_NEAR(expected_max_normal(3), 1.5 / std::sqrt(M_PI), 1e-6);
  EXPECT_EQ(expected_max_normal(1), 0);
  PlanRequest r = small_request(2);
  r.model.experts = 4, r.model.topk = 2;
  r.hardware.moe_fwd_s = r.hardware.moe_bwd_s = r.hardware.moe_wgt_s = 1e-9;
  r.hardware.moe_load_cv = 0.5;
  const double busiest = 1 + 0.5 * std::sqrt(4.0 / 3) / std::sqrt(2.0) / std::sqrt(M_PI);
  EXPECT_NEAR(busiest_rank_load(r.hardware, r.model, 2), busiest, 1e-6);
  EXPECT_EQ(busiest_rank_load(r.hardware, r.model, 1), 1);
  HardwareProfile wild = r.hardware;
  wild.moe_load_cv = 10;
  EXPECT_EQ(busiest_rank_load(wild, r.model, 2), 2);  // 2 of 2 choices, from both ranks
  EXPECT_EQ(busiest_rank_load(wild, r.model, 4), 2);  // 1 of 2 choices, from 4 ranks
  for (int ep : {1, 2}) {
    Layout l;
    l.dp = ep, l.ep = ep, l.micro_batch = 4;
    const double before = stage_costs(r, l)[0].forward;
    PlanRequest more = r;
    more.hardware.moe_fwd_s += 1e-9;
    const double after = stage_costs(more, l)[0].forward;
    const double rows = 4.0 * r.model.seq * 2 * (ep > 1 ? busiest : 1);
    const double elems = r.model.layers * rows * 4 * r.model.dim;
    EXPECT_NEAR((after - before) / 1e-9, elems, elems * 1e-6) << "ep " << ep;
  }
}

// --recompute selective reruns the attention core's forward in the backward only where the
// engine's block drops the probabilities: the gpt2 block on a kernel that keeps them
// (attention_row_stats 0); with row statistics, and in the llama block, it costs nothing.
TEST(PlanLocal, SelectiveRerunsTheCoreOnlyWhereTheBlockDropsProbabilities) {
  for (const bool bf16 : {false, true}) {
    PlanRequest r = small_request(1);
    Layout none, sel;
    none.micro_batch = sel.micro_batch = 8;
    none.precision = sel.precision = bf16 ? Precision::bf16 : Precision::fp32;
    sel.recompute = Recompute::selective;
    EXPECT_GT(step(r, sel), step(r, none)) << bf16;  // probabilities dropped: the core again
    (bf16 ? r.hardware.attention_row_stats_bf16 : r.hardware.attention_row_stats) = 1;
    EXPECT_EQ(step(r, sel), step(r, none)) << bf16;
    PlanRequest llama = small_request(1);
    llama.model.arch = Arch::llama;
    EXPECT_EQ(step(llama, sel), step(llama, none)) << bf16;
  }
}

}  // namespace
// The calibration's fit of the step factor and the per-microbatch cost: exact data gives
// back the figures it was made from; measurements the kernels already explain give the floor.
TEST(PlanLocal, StepFactorFitRecoversTheFiguresOfExactSteps) {
  const double W = 1e6, F = 1.2, c = 2e-9;
  std::vector<ReferenceStep> steps;
  for (int m : {1, 8, 2, 4, 1}) {
    const double kernels = 0.1 + 0.004 * m;  // smaller GEMMs cost a little more per row
    steps.push_back({m, kernels, F * kernels + m * W * c});
  }
  const auto [f, cost] = fit_step_factor(steps, W);
  EXPECT_NEAR(f, F, 1e-9);
  EXPECT_NEAR(cost, c, 1e-15);
  // 5% noise on one point moves the fit by less than the noise.
  steps[1].measured_s *= 1.05;
  const auto [f2, cost2] = fit_step_factor(steps, W);
  EXPECT_LT(std::abs(f2 / F - 1), 0.05);
  for (const ReferenceStep& r : steps)
    EXPECT_LT(std::abs((f2 * r.kernels_s + r.microbatches * W * cost2) / r.measured_s - 1), 0.05);
}

TEST(PlanLocal, StepFactorFitFloorsANegativeMicrobatchCost) {
  const double W = 1e6;
  // Steps faster per microbatch than the kernels say: no per-microbatch cost to find.
  std::vector<ReferenceStep> steps = {{1, 0.1, 0.12}, {8, 0.2, 0.21}, {4, 0.15, 0.17}};
  const auto [f, cost] = fit_step_factor(steps, W);
  EXPECT_GT(cost, 0);
  EXPECT_LT(cost * 8 * W, 1e-2 * 0.12);
  EXPECT_GT(f, 1.0);
  EXPECT_LT(f, 1.2);
}

}  // namespace mt::plan
