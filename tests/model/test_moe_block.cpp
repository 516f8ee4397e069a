// Blocks with a mixture-of-experts MLP inside the whole model: parameter registration
// (docs/contracts.md §4 names, the --moe-every convention), the composed backward including the
// aux-loss gradient against finite differences, and the routing statistics' invariants.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/gpt.h"

namespace mt {
namespace {

struct TinyMoe {
  ModelConfig cfg;
  std::vector<int> tokens, targets;
  int b = 2;
  TinyMoe() {
    cfg.layers = 2, cfg.dim = 16, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 11;
    cfg.experts = 4, cfg.topk = 2, cfg.moe_every = 2, cfg.aux_loss_coef = 0.1f;
    for (int i = 0; i < b * cfg.seq; ++i) {
      tokens.push_back(int(uniform01(4, 1, i) * cfg.vocab));
      targets.push_back(int(uniform01(4, 2, i) * cfg.vocab));
    }
  }
  int N() const { return b * cfg.seq; }
};

bool has(const ParamTable& t, const std::string& name) {
  for (const ParamInfo& p : t.entries())
    if (p.name == name) return true;
  return false;
}

TEST(MoeBlock, RegistersExpertsInPlaceOfTheDenseMlp) {
  TinyMoe t;
  GPT m(t.cfg, GPT::whole_model(t.cfg), TensorParallelShard{}, t.b);
  // moe_every 2: block 1 is MoE, block 0 stays dense.
  EXPECT_TRUE(has(m.table(), "transformer.h.0.mlp.c_fc.weight"));
  EXPECT_FALSE(has(m.table(), "transformer.h.0.mlp.router.weight"));
  EXPECT_FALSE(has(m.table(), "transformer.h.1.mlp.c_fc.weight"));
  EXPECT_FALSE(has(m.table(), "transformer.h.1.mlp.c_proj.bias"));
  EXPECT_TRUE(has(m.table(), "transformer.h.1.mlp.router.weight"));
  for (int e = 0; e < 4; ++e)
    for (const char* s : {"c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias"})
      EXPECT_TRUE(has(m.table(), "transformer.h.1.mlp.experts." + std::to_string(e) + "." + s))
          << e << s;
  ASSERT_EQ(m.moe_layers().size(), 1u);
  EXPECT_FALSE(is_moe_layer(t.cfg, 0));
  EXPECT_TRUE(is_moe_layer(t.cfg, 1));
}

// The differentiated objective of one group: mean CE + the aux loss of every MoE layer.
double objective(GPT& m, const TinyMoe& t) {
  for (MoeLayer* l : m.moe_layers()) l->reset_stats();
  double v = m.eval_microbatch(t.tokens.data(), t.targets.data(), t.b, t.cfg.seq) / t.N();
  for (MoeLayer* l : m.moe_layers()) v += l->stats().aux_sum;
  return v;
}

TEST(MoeBlock, GradientsMatchFiniteDifferencesWithAuxLoss) {
  TinyMoe t;
  t.cfg.moe_every = 1;  // both blocks MoE
  GPT m(t.cfg, GPT::whole_model(t.cfg), TensorParallelShard{}, t.b);
  m.init(5);
  float* p = m.params().data();
  for (size_t i = 0; i < m.table().total(); ++i) p[i] += float(0.3 * normal01(9, 9, i));
  m.zero_grads();
  m.train_microbatch(t.tokens.data(), t.targets.data(), t.b, t.cfg.seq, 1.0f / t.N());
  const float* g = m.grads().data();
  // A perturbation that changes some token's top-k choice makes the objective jump (the
  // routing is piecewise constant): such elements are recognised by two step sizes that
  // disagree, and skipped; most elements must be smooth.
  auto fd_at = [&](size_t i, float h) {
    const float saved = p[i];
    p[i] = saved + h;
    const double up = objective(m, t);
    p[i] = saved - h;
    const double down = objective(m, t);
    p[i] = saved;
    return (up - down) / (2 * h);
  };
  int checked = 0, skipped = 0;
  for (const ParamInfo& info : m.table().entries()) {
    for (size_t k = 0; k < 2; ++k) {
      const size_t i = info.offset + (k * 7919) % info.numel;
      const double fd = fd_at(i, 1e-2f), fd2 = fd_at(i, 5e-3f);
      const double tol = 2e-3 + 2e-2 * std::fabs(fd);
      if (std::fabs(fd - fd2) > tol) {
        ++skipped;
        continue;
      }
      EXPECT_NEAR(g[i], fd, tol) << info.name << "[" << i - info.offset << "]";
      ++checked;
    }
  }
  EXPECT_LT(skipped, checked / 4) << "too many routing discontinuities to test anything";
  EXPECT_GT(checked, 40);
}

TEST(MoeBlock, LoadCountsKeptAssignmentsAfterDrops) {
  TinyMoe t;
  t.cfg.capacity_factor = 0.5f;  // capacity ceil(16*2*0.5/4) = 4 of 8 average: drops
  GPT m(t.cfg, GPT::whole_model(t.cfg), TensorParallelShard{}, t.b);
  m.init(3);
  m.zero_grads();
  m.train_microbatch(t.tokens.data(), t.targets.data(), t.b, t.cfg.seq, 1.0f / t.N());
  const MoeStats& st = m.moe_layers()[0]->stats();
  const int64_t kept = std::accumulate(st.load.begin(), st.load.end(), int64_t(0));
  const int64_t selected = std::accumulate(st.selected.begin(), st.selected.end(), int64_t(0));
  EXPECT_EQ(st.assignments, int64_t(t.N()) * t.cfg.topk);
  EXPECT_EQ(selected, st.assignments);
  EXPECT_GT(st.dropped, 0);
  EXPECT_EQ(kept, st.assignments - st.dropped);
  for (int64_t l : st.load) EXPECT_LE(l, 4);
  EXPECT_EQ(st.groups, 1);
  EXPECT_GT(st.aux_sum, 0.0);
}

}  // namespace
}  // namespace mt
