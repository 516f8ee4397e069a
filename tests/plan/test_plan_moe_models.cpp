// DeepSeek-style MoE in the planner (docs/planner.md, "MoE"): routed experts of their own
// width, shared experts, first dense layers in the parameters and FLOPs; the tokens split
// over tp (docs/moe.md) in the cost and the tp communication; the overlapped all-to-all;
// full recomputation with experts searched.
#include <gtest/gtest.h>

#include "plan/cost_model.h"
#include "plan/model_flops.h"
#include "plan/search.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

ModelConfig deepseek_like() {
  ModelConfig m;
  m.arch = Arch::llama;
  m.layers = 6, m.dim = 256, m.heads = 8, m.seq = 64, m.vocab = 512;
  m.ffn_dim = 768;
  m.experts = 16, m.topk = 4, m.expert_ffn_dim = 64, m.shared_experts = 1;
  m.first_dense_layers = 2;
  m.router = RouterScore::sigmoid;
  return m;
}

TEST(PlanMoeModels, ParametersAreTheEnginesCount) {
  const ModelConfig m = deepseek_like();
  EXPECT_EQ(model_params(m), double(m.num_params()));
}

// Per token and MoE layer, forward: the router 2hE, topk routed SwiGLUs of width Fe and the
// shared one (2 x 3 h width each); x 3 for the step.
TEST(PlanMoeModels, FlopsUseTheRoutedWidthAndTheSharedExperts) {
  ModelConfig m = deepseek_like();
  const double base = model_flops_per_step(m, 4);
  m.expert_ffn_dim = 128;
  const double wider = model_flops_per_step(m, 4);
  const double moe = double(m.moe_layers()), tokens = 4.0 * m.seq, h = m.dim;
  EXPECT_NEAR(wider - base, 3 * tokens * moe * (m.topk + 1) * 6 * h * 64, 1e-6 * wider);
}

CostContext context(const PlanRequest& r, const Layout& l) {
  return make_context(r, l);
}

PlanRequest gpu_request(const ModelConfig& m) {
  PlanRequest r;
  r.model = m;
  r.batch = 8;
  r.hardware = preset_profile("h100-80gb");
  r.devices = 2;
  return r;
}

// Tokens split over tp: each tp rank's experts see N / t rows, and under SP an MoE layer
// without shared experts adds no tp collective beyond the attention's.
TEST(PlanMoeModels, TensorParallelSplitsTheTokens) {
  ModelConfig m = deepseek_like();
  m.shared_experts = 0;
  m.dim = 2048, m.seq = 4096, m.expert_ffn_dim = 1024;  // GEMMs past their fixed costs
  const PlanRequest r = gpu_request(m);
  Layout one, two;
  two.tp = 2, two.sequence_parallel = true, one.micro_batch = two.micro_batch = 4;
  double ep = 0;
  const Passes whole = streamed_moe(context(r, one), &ep);
  const Passes split = streamed_moe(context(r, two), &ep);
  EXPECT_LT(split.forward, 0.6 * whole.forward);
  const CostContext c = context(r, two);
  const BlockCosts dense = c.model->block(c, 0, 0), moe = c.model->block(c, 2, 0);
  EXPECT_NEAR(moe.tp_comm, dense.tp_comm / 2, 1e-12);
  // The shared experts are a tp-split MLP: with them the MLP's collective is back.
  PlanRequest shared = r;
  shared.model.shared_experts = 1;
  const CostContext cs = context(shared, two);
  EXPECT_NEAR(cs.model->block(cs, 2, 0).tp_comm, dense.tp_comm, 1e-12);
}

TEST(PlanMoeModels, ExposedAllToAllPipelinesOverParts) {
  EXPECT_DOUBLE_EQ(exposed_all_to_all(4, 100, 1), 4);
  EXPECT_DOUBLE_EQ(exposed_all_to_all(4, 100, 2), 2);  // the first dispatch, the last combine
  EXPECT_DOUBLE_EQ(exposed_all_to_all(4, 0, 2), 4);    // nothing to hide under
  EXPECT_DOUBLE_EQ(exposed_all_to_all(4, 2, 2), 3);    // 2 + (4 - 2) / 2
}

// A software that pipelines the all-to-alls (a2a_overlap_parts) exposes less of them.
TEST(PlanMoeModels, OverlappedAllToAllExposesLess) {
  PlanRequest r = gpu_request(deepseek_like());
  r.hardware.devices_per_node = 1;
  Layout l;
  l.dp = 2, l.ep = 2, l.micro_batch = 4;
  double plain = 0, overlapped = 0;
  streamed_moe(context(r, l), &plain);
  r.hardware.a2a_overlap_parts = 2;
  streamed_moe(context(r, l), &overlapped);
  EXPECT_GT(plain, 0);
  EXPECT_LT(overlapped, plain);
  EXPECT_GE(overlapped, plain / 2 - 1e-15);
}

// --recompute full with experts is a layout train accepts now (docs/moe.md), so it is searched.
TEST(PlanMoeModels, FullRecomputationWithExpertsIsSearched) {
  PlanRequest r = testing::small_request(2);
  r.model.experts = 4;
  r.recompute = Recompute::full;
  const SearchResult s = search_layouts(r, 1);
  ASSERT_FALSE(s.candidates.empty());
  EXPECT_EQ(s.candidates[0].layout.recompute, Recompute::full);
}

}  // namespace
}  // namespace mt::plan
