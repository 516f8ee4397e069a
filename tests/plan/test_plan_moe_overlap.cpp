// The local cost model of the engine's overlapped MoE exchange (--moe-overlap-parts P > 1,
// model/moe_parts.h; docs/planner.md "MoE"): the waits MoeParts::run leaves, the local work
// that fills the first dispatch and the last combine (the shared experts' halves, the
// router's logits gradient, the routed experts' weight gradients where the trainer moves
// them into B), and P calls of each expert over 1/P of its rows.
#include <gtest/gtest.h>

#include "model/moe_parts.h"
#include "plan/cost_model.h"
#include "plan/overlapped_exchange.h"
#include "plan/time_model.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

// Equal parts' figures (P of each), for the cases where only the order matters.
PartsPass equal(double d, double c, double X, double first, double last, int P) {
  const size_t n = size_t(P);
  return {std::vector<double>(n, d), std::vector<double>(n, c), std::vector<double>(n, X), first,
          last};
}

// By hand, P = 3, d 3, c 2, X 4, first 1, last 0.5, in MoeParts::run's order (dispatches
// 0 and 1 leave at 0, the channel serves in issue order): dispatch 0 is in at 3, dispatch 1
// at 6; part 0's wait 3 - 1 = 2. At 3 dispatch 2 is queued behind dispatch 1 (in at 9);
// part 0's experts end at 7 and combine 0 is queued behind it (in at 11). Dispatch 1 (6)
// is in: no wait; part 1's experts end at 11, combine 1 in at 13. Dispatch 2 (9) is in;
// part 2's experts end at 15, combine 2 in at 17; the last local work ends at 15.5: 1.5.
// Total 3.5 (the one-ahead order of stop 41 left 4.5: dispatch 2 queued behind combine 0).
TEST(PlanMoeOverlap, WaitsAreWhatTheExpertsAndTheLocalWorkLeave) {
  EXPECT_DOUBLE_EQ(exposed_parts_exchange(equal(3, 2, 4, 1, 0.5, 3)), 3.5);
  // No compute: the channel's whole work, P (d + c) = 4 x 4.
  EXPECT_DOUBLE_EQ(exposed_parts_exchange(equal(2, 2, 0, 0, 0, 4)), 16);
  // Experts of 1 s against parts of 2 + 2: the pass takes the channel's 16 s, of which the
  // four parts' experts (4 s) fill 4: 2 + 1 + 1 + 3 + 5 = 12 waited.
  EXPECT_DOUBLE_EQ(exposed_parts_exchange(equal(2, 2, 1, 0, 0, 4)), 12);
  // Everything covered.
  EXPECT_DOUBLE_EQ(exposed_parts_exchange(equal(1, 1, 5, 1, 1, 2)), 0);
  // P = 2, d 4, c 3, X 2, first 0, last 1: dispatch 0 in at 4 (waited 4), dispatch 1 at 8;
  // combine 0 issued at 6 waits for the channel until 8 (in at 11); dispatch 1 waited
  // 8 - 6 = 2; part 1's experts end at 10, combine 1 in at 14, the last local work ends at
  // 11: 3. Total 9.
  EXPECT_DOUBLE_EQ(exposed_parts_exchange(equal(4, 3, 2, 0, 1, 2)), 9);
}

// Dispatch 1 leaves with dispatch 0, before the first local work, not after dispatch 0's
// wait. P = 2, d 1, c 1, X 0.5, first 2, last 0: dispatches 0 and 1 are in at 1 and 2,
// under the first local work (no wait); part 0's experts end at 2.5, combine 0 in at 3.5;
// part 1's experts end at 3, combine 1 in at 4.5: 1.5. One ahead (dispatch 1 issued at 2,
// in at 3) waits 0.5 more for it, and combine 1 is in at 5: 2.
TEST(PlanMoeOverlap, TheSecondDispatchTravelsUnderTheFirstLocalWork) {
  EXPECT_DOUBLE_EQ(exposed_parts_exchange(equal(1, 1, 0.5, 2, 0, 2)), 1.5);
}

// By hand, P = 4 with the engine's sizes (rows 1 : 2 : 2 : 1, MoeParts::token_begin): a
// pass whose whole dispatch takes 12, combine 6 and experts 12 (each linear in the rows),
// first 1, last 0.5. Parts: d 2 4 4 2, c 1 2 2 1, X 2 4 4 2. Dispatches 0 and 1 in at 2
// and 6: part 0 waits 2 - 1 = 1; dispatch 2 (issued at 2) in at 10; part 0's experts end
// at 4, combine 0 in at 11; dispatch 1 waits 6 - 4 = 2; dispatch 3 (issued at 6) in at 13;
// part 1's experts end at 10, combine 1 in at 15; dispatch 2 is in (10), part 2's experts
// end at 14, combine 2 in at 17; dispatch 3 is in (13), part 3's experts end at 16,
// combine 3 in at 18; the last local work ends at 16.5: 1.5. Total 4.5. Equal quarters
// (d 3, c 1.5, X 3) wait 2 (dispatch 0) + 1.5 (dispatch 3, in at 13.5 after part 2's
// experts end at 12) + 1 (combine 3 at 18, the local work ends at 17) = 4.5.
TEST(PlanMoeOverlap, EachWaitTakesTheSizesOfThePartsItInvolves) {
  const auto linear = [](double seconds) { return [=](double rows) { return seconds * rows; }; };
  const double rows = 6;  // one unit per row: the figures per part are whole numbers
  const PartsPass p{per_part(4, rows, linear(2)), per_part(4, rows, linear(1)),
                    per_part(4, rows, linear(2)), 1, 0.5};
  EXPECT_EQ(p.dispatch, (std::vector<double>{2, 4, 4, 2}));
  EXPECT_DOUBLE_EQ(exposed_parts_exchange(p), 4.5);
  EXPECT_DOUBLE_EQ(exposed_parts_exchange(equal(3, 1.5, 3, 1, 0.5, 4)), 4.5);
  // Two parts stay equal halves.
  EXPECT_EQ(per_part(2, rows, linear(1)), (std::vector<double>{3, 3}));
}

// The planner's shares are the engine's token boundaries (one rule, model/moe_part_sizes.h):
// for every P and a row count each share divides, part p's rows are MoeParts'.
TEST(PlanMoeOverlap, PartSharesAreTheEnginesBoundaries) {
  for (int P = 2; P <= 8; ++P) {
    SlotLayout layout;
    const MoeParts parts(P, 1, 1, 1, 1, layout);
    const int rows = 12 * (2 * P - 2) * P;
    const std::vector<double> share = per_part(P, rows, [](double r) { return r; });
    for (int q = 0; q < P; ++q)
      EXPECT_DOUBLE_EQ(share[q], parts.token_begin(q + 1, rows) - parts.token_begin(q, rows))
          << P << " parts, part " << q;
  }
}

// A llama MoE (two MoE layers after one dense, a shared expert, sigmoid router) with round
// figures and a slow link, so that every wait shows.
PlanRequest moe_request(int parts) {
  PlanRequest r = testing::small_request(2);
  ModelConfig& m = r.model;
  m.arch = Arch::llama, m.tie_embeddings = false;
  m.layers = 3, m.ffn_dim = 128;
  m.experts = 4, m.topk = 2, m.expert_ffn_dim = 64, m.shared_experts = 1;
  m.first_dense_layers = 1, m.router = RouterScore::sigmoid;
  HardwareProfile& h = r.hardware;
  h.moe_fwd_s = 1e-9, h.moe_bwd_s = 2e-9, h.moe_wgt_s = 3e-9, h.moe_load_cv = 0;
  h.intra_busbw = h.inter_busbw = 0.15e9;
  h.a2a_overlap_parts = parts;
  return r;
}

Layout ep2(int zero, const char* schedule = "1f1b") {
  Layout l;
  l.dp = 2, l.ep = 2, l.micro_batch = 4, l.zero = zero, l.schedule = schedule;
  return l;
}

// The local work of the test model's MoE layer (128 tokens, h 64, one shared expert of
// width F 64, [gate; up] 2F wide) that covers the first dispatch and the last combine of
// each pass, by hand: forward [gate; up] + SwiGLU first, down_proj last; backward down_proj's
// input gradient + the SwiGLU's first, [gate; up]'s, the router's logits gradient and (ZeRO
// 0, 1f1b) the routed experts' weight gradients over all 256 rows last.
struct LocalCover {
  double first_forward, last_forward, first_backward, last_backward;
  double gate_up_backward_and_logits;
};
LocalCover local_cover(const CostContext& c, int zero) {
  const ComputeRates& R = c.rates;
  const double N = 128, h = 64, U = 128, F = 64;
  const auto g = [&](double a, double b, double k) { return local_gemm_seconds(R, a, b, k); };
  const Passes gate_up = linear_passes(c, R, N, {{U, h}}), down = linear_passes(c, R, N, {{h, F}});
  const double act = pointwise_seconds(R, N * F, 3 * N * F * 4, 1);
  const double act_bwd = pointwise_seconds(R, N * F, 5 * N * F * 4, 1);
  const double logits = pointwise_seconds(R, N * 4, 3 * N * 4 * 4, 1);
  const double dw =
      zero == 0 ? 2 * (g(U, h, 128) + g(h, F, 128)) * R.weight_grad_ratio + 256 * F * 3e-9 : 0;
  return {gate_up.forward + act, down.forward, down.backward + act_bwd,
          gate_up.backward + logits + dw, gate_up.backward + logits};
}

// The W of the unit above each of the test model's MoE layers, which the engine runs under
// the layer's first backward dispatch where expert_grads_in_b holds (ZeRO 0-1; tp 1, no
// full recomputation; ModelChunk::cover_below): layer 1's is block 2's, layer 2's the
// head's, as the planner prices those W. None at ZeRO 2.
std::vector<double> covers(const CostContext& c, int zero) {
  if (zero >= 2) return {0, 0};
  double tp = 0;
  return {c.model->block(c, 2, 0).passes.weight, c.model->head(c, &tp).weight};
}

// The stage's exposed exchange derived from the engine's order for P = 2: N = 4 x 32 = 128
// tokens, 256 rows, 64 per expert and part, one part's rows 128 x h fp32 each way. Forward
// covers: the shared expert's [gate; up] and SwiGLU, then its down_proj; backward: down_proj's
// input gradient and the SwiGLU's, then [gate; up]'s, the router's logits gradient and (ZeRO
// 0, 1f1b) the routed experts' weight gradients over all 256 rows, and (ZeRO 0) the unit
// above's W first. Dispatches 0 and 1 leave at 0 (in at d and 2d); combine 0 queues
// behind dispatch 1.
TEST(PlanMoeOverlap, StageExposesWhatTheEnginesOrderLeaves) {
  for (const int zero : {0, 2}) {
    const PlanRequest r = moe_request(2);
    const Layout l = ep2(zero);
    const CostContext c = make_context(r, l);
    const ComputeRates& R = c.rates;
    const double h = 64, U = 128, F = 64;
    const auto g = [&](double a, double b, double k) { return local_gemm_seconds(R, a, b, k); };
    const double d = collective_seconds(r.hardware, Collective::all_to_all, 128 * h * 4, c.ep);
    const double Xf = 2 * (g(64, U, h) + g(64, h, F)), Xb = Xf * R.input_grad_ratio;
    const LocalCover cover = local_cover(c, zero);
    const auto over = [](double x) { return std::max(0.0, x); };
    const auto pass = [&](double X, double first, double last) {
      const double t0 = std::max(first, d);        // part 0's rows in
      const double t1 = std::max(t0 + X, 2 * d);   // part 1's rows in
      const double c0 = t1 + d;                    // combine 0, behind dispatch 1
      const double c1 = std::max(t1 + X, c0) + d;  // combine 1, behind combine 0
      return (t0 - first) + (t1 - t0 - X) + over(c1 - (t1 + X + last));
    };
    const std::vector<double> above = covers(c, zero);
    double layers = 0;
    for (const double w : above)
      layers += pass(Xf, cover.first_forward, cover.last_forward) +
                pass(Xb, cover.first_backward + w, cover.last_backward);
    const StageCosts sc = stage_costs(r, l)[0];
    EXPECT_NEAR(sc.ep_comm, layers, 1e-12 * layers) << "zero " << zero;
    // Every term is in play: the link is slower than a part's experts and than the first
    // local work.
    EXPECT_GT(d, Xf);
    EXPECT_GT(d, cover.first_forward);
    EXPECT_GT(d, Xb);
    EXPECT_GT(d, cover.gate_up_backward_and_logits);
  }
}

// The same stage at P = 4, the engine's sizes (1 : 2 : 2 : 1 of the 256 rows: small parts of
// 256/6 rows, 128/6 per expert, large ones twice that), every wait with its parts' figures:
// part 0's dispatch (small) beyond the first local work; dispatch 1 (large) beyond part 0's
// experts (small); combine 0 (small) + dispatch 2 (large) beyond part 1's experts (large);
// combine 1 (large) + dispatch 3 (small) beyond part 2's (large); what is left of combine 2
// (large) after part 3's experts (small), then combine 3 (small), beyond the last local work.
// In the engine's order: dispatches 0 (small) and 1 (large) at 0, dispatch p+2 when part p's
// rows are in, combine p when its experts end, the channel serving them in that order.
TEST(PlanMoeOverlap, StageAtFourPartsPricesTheEnginesUnevenSizes) {
  for (const int zero : {0, 2}) {
    const PlanRequest r = moe_request(4);
    const Layout l = ep2(zero);
    const CostContext c = make_context(r, l);
    const ComputeRates& R = c.rates;
    const double h = 64, U = 128, F = 64, small = 256.0 / 6, large = 2 * small;
    const auto g = [&](double a, double b, double k) { return local_gemm_seconds(R, a, b, k); };
    const auto a2a = [&](double rows) {
      return collective_seconds(r.hardware, Collective::all_to_all, rows * h * 4, c.ep);
    };
    const auto experts = [&](double rows) { return 2 * (g(rows / 2, U, h) + g(rows / 2, h, F)); };
    const double ds = a2a(small), dl = a2a(large);
    const double Xsf = experts(small), Xlf = experts(large);
    const double Xsb = Xsf * R.input_grad_ratio, Xlb = Xlf * R.input_grad_ratio;
    const LocalCover cover = local_cover(c, zero);
    const auto over = [](double x) { return std::max(0.0, x); };
    const auto pass = [&](double Xs, double Xl, double first, double last) {
      const double t0 = std::max(first, ds), d2 = std::max(t0, ds + dl) + dl, e0 = t0 + Xs;
      const double c0 = std::max(e0, d2) + ds, t1 = std::max(e0, ds + dl);
      const double d3 = std::max(t1, c0) + ds, e1 = t1 + Xl, c1 = std::max(e1, d3) + dl;
      const double t2 = std::max(e1, d2), e2 = t2 + Xl, c2 = std::max(e2, c1) + dl;
      const double t3 = std::max(e2, d3), e3 = t3 + Xs, c3 = std::max(e3, c2) + ds;
      return (t0 - first) + (t1 - e0) + (t2 - e1) + (t3 - e2) + over(c3 - (e3 + last));
    };
    double layers = 0;
    for (const double w : covers(c, zero))
      layers += pass(Xsf, Xlf, cover.first_forward, cover.last_forward) +
                pass(Xsb, Xlb, cover.first_backward + w, cover.last_backward);
    const StageCosts sc = stage_costs(r, l)[0];
    EXPECT_NEAR(sc.ep_comm, layers, 1e-12 * layers) << "zero " << zero;
    // The waits between the parts are in play: the large parts' exchanges outlast their
    // cover.
    EXPECT_GT(dl, Xsf);
    EXPECT_GT(ds + dl, Xlf);
  }
}

// The first backward dispatch of each MoE layer is covered by the unit above's W where the
// engine hands it over (ZeRO 0-1, tp 1, no full recomputation): the stage's exposed
// exchange is lower than under full recomputation, which takes the cover away and changes
// no exchange, by at most the two W (a W longer than the dispatch's wait delays the pass;
// the stages above derive the exact figure).
TEST(PlanMoeOverlap, TheUnitAbovesWCoversTheFirstBackwardDispatch) {
  const PlanRequest r = moe_request(2);
  Layout covered = ep2(0), full = ep2(0);
  full.recompute = Recompute::full;
  const CostContext c = make_context(r, covered);
  const std::vector<double> above = covers(c, 0);
  const StageCosts a = stage_costs(r, covered)[0], b = stage_costs(r, full)[0];
  EXPECT_GT(above[0], 0);
  EXPECT_GT(above[1], 0);
  EXPECT_GT(b.ep_comm - a.ep_comm, 0.1 * (above[0] + above[1]));
  EXPECT_LE(b.ep_comm - a.ep_comm, (above[0] + above[1]) * (1 + 1e-12));
  // At ZeRO 2 the layer takes no cover: the same with and without full recomputation.
  Layout z2 = ep2(2), z2_full = ep2(2);
  z2_full.recompute = Recompute::full;
  EXPECT_NEAR(stage_costs(r, z2)[0].ep_comm, stage_costs(r, z2_full)[0].ep_comm, 1e-15);
}

// Where the trainer moves the experts' weight gradients into B (train/expert_grads_in_b.h:
// ZeRO 0-1, schedules whose W follows B), the stage's W loses them and its B gains them,
// and the last backward combine hides behind them; at ZeRO 2, and under zb-h1 (pp 2),
// they stay in W.
TEST(PlanMoeOverlap, ExpertWeightGradientsMoveIntoBWhereTheTrainerMovesThem) {
  const PlanRequest r = moe_request(2);
  const StageCosts z0 = stage_costs(r, ep2(0))[0], z2 = stage_costs(r, ep2(2))[0];
  const double moved = z2.weight - z0.weight;
  EXPECT_GT(moved, 0);
  EXPECT_NEAR(z0.backward - z0.ep_comm / 2, z2.backward - z2.ep_comm / 2 + moved, 1e-12);
  EXPECT_LT(z0.ep_comm, z2.ep_comm);
  PlanRequest deep = r;
  deep.model.layers = 5;
  Layout zb = ep2(0, "zb-h1"), fb = ep2(0, "1f1b");
  zb.pp = fb.pp = 2, zb.dp = fb.dp = 2;
  EXPECT_GT(stage_costs(deep, zb)[1].weight, stage_costs(deep, fb)[1].weight);
}

// P parts: each expert runs P times over 1/P of its rows (P calls, so never cheaper than one
// at these sizes), the exposed exchange falls below the blocking one, and the plan trains
// it: train's options and command carry --moe-overlap-parts.
TEST(PlanMoeOverlap, PartsCallTheExpertsPTimesAndTrainCarriesThem) {
  const PlanRequest one = moe_request(1), two = moe_request(2);
  const Layout l = ep2(2);
  const StageCosts a = stage_costs(one, l)[0], b = stage_costs(two, l)[0];
  EXPECT_GT(b.forward - b.ep_comm / 2, a.forward - a.ep_comm / 2);
  EXPECT_LT(b.ep_comm, a.ep_comm);
  EXPECT_EQ(train_options(two, l).parallel.moe_overlap_parts, 2);
  EXPECT_EQ(train_options(one, l).parallel.moe_overlap_parts, 1);
  EXPECT_NE(train_command(two, l).find(" --moe-overlap-parts 2"), std::string::npos);
  EXPECT_EQ(train_command(one, l).find("--moe-overlap-parts"), std::string::npos);
}

}  // namespace
}  // namespace mt::plan
