// Expert parallelism against one worker: at the same dp (so the same tokens per rank and
// the same capacity drops), ep = 2 and 4 give every rank the outputs and input gradients
// it has at ep = 1, and the global gradients — router summed over dp, experts summed over
// ep_replica on their owner — equal the sum of the ep = 1 ranks' gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>

#include "core/threads.h"
#include "model/moe_test_util.h"
#include "parallel/expert_parallel/router_balance.h"
#include "parallel/expert_parallel/token_dispatcher.h"
#include "parallel/parallel_context.h"

namespace mt {
namespace {

using moe_test::Harness;
constexpr int kMicrobatches = 2;

struct RankResult {
  std::vector<float> y[kMicrobatches], dh[kMicrobatches];
};

struct Case {
  int dp, ep, k;
  float capacity;
};

std::vector<float> input(int dp_rank, int mb, int stream, size_t n) {
  return moe_test::random_vec(n, 11, uint64_t(100 * dp_rank + 10 * mb + stream));
}

// Pipeline-like order F0 F1 B1 W1 B0 W0 on any layer; the same on every rank of a group.
template <class Layer>
void run_microbatches(Harness& m, Layer&, int dp_rank, int N, int C, RankResult& out) {
  std::vector<float> h[kMicrobatches], dy[kMicrobatches];
  for (int mb = 0; mb < kMicrobatches; ++mb) {
    h[mb] = input(dp_rank, mb, 1, size_t(N) * C);
    dy[mb] = input(dp_rank, mb, 2, size_t(N) * C);
    out.y[mb].resize(size_t(N) * C);
    out.dh[mb].resize(size_t(N) * C);
    m.layer->forward(m.slot(mb), h[mb].data(), out.y[mb].data(), N);
  }
  for (int mb = kMicrobatches - 1; mb >= 0; --mb) {
    m.layer->backward_input(m.slot(mb), h[mb].data(), dy[mb].data(), out.dh[mb].data(), N);
    m.layer->backward_weight(m.slot(mb), h[mb].data(), N);
  }
}

void expect_close(const float* got, const float* want, size_t n, const std::string& what) {
  double scale = 0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, double(std::fabs(want[i])));
  for (size_t i = 0; i < n; ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + scale)) << what << "[" << i << "]";
}

void check_case(const Case& c) {
  const int N = 16, C = 8, E = 8;
  const ModelConfig cfg = moe_test::config(C, E, c.k, c.capacity);
  // ep = 1 reference: each dp rank alone, all experts; gradients summed over ranks.
  std::vector<RankResult> ref(c.dp);
  Harness one(cfg, {}, N, kMicrobatches);
  int64_t ref_dropped = 0;
  for (int d = 0; d < c.dp; ++d) {
    run_microbatches(one, *one.layer, d, N, C, ref[d]);
    ref_dropped += one.layer->stats().dropped;
  }
  if (c.capacity > 0) {
    ASSERT_GT(ref_dropped, 0) << "the capacity case should drop";
  }

  std::mutex mu;
  std::map<std::string, int> compared;  // tensor name -> ranks that compared it
  run_local(c.dp, WorldOptions{.timeout_s = 60}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, c.dp, 1, c.ep});
    TokenDispatcher dispatcher(ctx.ep);
    Harness m(cfg, {ctx.coord.ep_rank, c.ep, &dispatcher}, N, kMicrobatches);
    EXPECT_EQ(m.layer->local_experts(), E / c.ep);
    RankResult got;
    run_microbatches(m, *m.layer, ctx.coord.dp, N, C, got);
    for (int mb = 0; mb < kMicrobatches; ++mb) {
      expect_close(got.y[mb].data(), ref[ctx.coord.dp].y[mb].data(), got.y[mb].size(), "y");
      expect_close(got.dh[mb].data(), ref[ctx.coord.dp].dh[mb].data(), got.dh[mb].size(), "dh");
    }
    // The reduce-group rule of moe_layer.h.
    for (const ParamInfo& p : m.table.entries()) {
      float* g = m.grads.data() + p.offset;
      Communicator& group = is_expert_param(p.name) ? *ctx.ep_replica : *ctx.dp;
      group.all_reduce(g, g, p.numel, DType::f32, ReduceOp::sum).wait();
      expect_close(g, one.grad(p.name), p.numel, p.name);
      std::lock_guard lock(mu);
      ++compared[p.name];
    }
    // Metrics summed over dp equal the one-worker totals.
    const MoeStepMetrics mm = reduce_moe_metrics(*m.layer, ctx.dp.get());
    const MoeStats& st = one.layer->stats();
    for (int e = 0; e < E; ++e) EXPECT_EQ(mm.expert_load[e], st.load[e]) << e;
    EXPECT_NEAR(mm.dropped_frac, double(st.dropped) / double(st.assignments), 1e-12);
    EXPECT_NEAR(mm.aux_loss, st.aux_sum / double(st.groups), 1e-6);
  });
  // Every expert compared on exactly dp/ep ranks (its replicas), the router on all.
  EXPECT_EQ(compared["transformer.h.0.mlp.router.weight"], c.dp);
  for (int e = 0; e < E; ++e)
    EXPECT_EQ(compared["transformer.h.0.mlp.experts." + std::to_string(e) + ".c_fc.weight"],
              c.dp / c.ep)
        << e;
}

TEST(ExpertParallel, Ep2MatchesEp1Dropless) {
  check_case({2, 2, 2, 0});
}
TEST(ExpertParallel, Ep2MatchesEp1Capacity) {
  check_case({2, 2, 2, 1.0f});
}
TEST(ExpertParallel, Ep4MatchesEp1Dropless) {
  check_case({4, 4, 2, 0});
}
TEST(ExpertParallel, Ep4MatchesEp1CapacityTop1) {
  check_case({4, 4, 1, 1.0f});
}
TEST(ExpertParallel, Ep2Dp4ReducesExpertsOverReplicas) {
  check_case({4, 2, 2, 1.25f});
}

TEST(ExpertParallel, RouterBiasUpdateIsTheSameOnEveryRank) {
  const int N = 16, C = 8, E = 4;
  const ModelConfig cfg = moe_test::config(C, E, 2, 0, 0.1f, 0.01f);
  std::vector<std::vector<float>> bias(2);
  run_local(2, WorldOptions{.timeout_s = 60}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, 2, 1, 2});
    TokenDispatcher dispatcher(ctx.ep);
    Harness m(cfg, {ctx.coord.ep_rank, 2, &dispatcher}, N);
    std::vector<float> y(size_t(N) * C);
    for (int step = 0; step < 3; ++step) {
      m.layer->reset_stats();
      std::vector<float> h = input(ctx.coord.dp, step, 1, size_t(N) * C);
      m.layer->forward(m.slot(), h.data(), y.data(), N);
      update_router_bias(*m.layer, ctx.dp.get());
    }
    bias[ctx.coord.dp] = m.layer->router_bias();
  });
  EXPECT_EQ(bias[0], bias[1]);
  float moved = 0;
  for (float b : bias[0]) moved += std::fabs(b);
  EXPECT_GT(moved, 0.0f);
}

}  // namespace
}  // namespace mt
