// The bf16 SwiGLU experts at ep 1 sum their rows into the tokens in their last GEMMs' stores
// (expert_mlp.h, sums_into_tokens; grouped_gemm.h, *_into_tokens): the gate-weighted
// combine in the down projection's forward, the scatter-add of the input gradients in the up
// projection's. The layer's results are bit for bit those of the sums over stored rows
// (the fusion turned off), of the expert-parallel path (rows through an exchange) and of the
// overlapped parts (--moe-overlap-parts), which all sum each token's rows in row order; and
// the two permutation passes of the sums are gone (counted, never timed).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/grouped_gemm.h"
#include "kernels/phase_profile.h"
#include "model/forwarding_exchange.h"
#include "model/moe_test_util.h"

namespace mt {
namespace {

using moe_test::Harness;

constexpr int kN = 24;

ModelConfig llama_config() {
  ModelConfig cfg = moe_test::config(32, 4, 2, 1.0f);  // capacity 1.0: some drops
  cfg.arch = Arch::llama, cfg.heads = 2, cfg.expert_ffn_dim = 16;
  return cfg;
}

// An exchange over one rank whose rows travel (TokenExchange::moves_rows): the layer takes
// the expert-parallel path, as at ep > 1.
using MovingIdentity = moe_test::ForwardingExchange;

// One forward + backward (B and W) of a fresh bf16 llama MoE layer on `ep`: y, dh and every
// gradient, one after the other.
// A fresh bf16 llama MoE layer on `shard`, with its inputs and outputs.
struct Layer {
  uint64_t version = 1;
  ExpertParallelShard ep;
  std::unique_ptr<Harness> m;
  std::vector<float> h, dy, y, dh;
  explicit Layer(const ExpertParallelShard& shard) : ep(shard) {
    ep.bf16_version = &version;
    const ModelConfig cfg = llama_config();
    m = std::make_unique<Harness>(cfg, ep, kN);
    const size_t n = size_t(kN) * cfg.dim;
    h = moe_test::random_vec(n, 3, 1), dy = moe_test::random_vec(n, 3, 2);
    y.resize(n), dh.resize(n);
  }
  void forward(const LocalWork& local = {}) {
    m->layer->forward(m->slot(), h.data(), y.data(), kN, local);
  }
  void backward_input(const LocalWork& local = {}) {
    m->layer->backward_input(m->slot(), h.data(), dy.data(), dh.data(), kN, local);
  }
};

std::vector<float> run(const ExpertParallelShard& shard) {
  Layer l(shard);
  Harness& m = *l.m;
  l.forward();
  l.backward_input();
  m.layer->backward_weight(m.slot(), l.h.data(), kN);
  EXPECT_GT(m.layer->stats().dropped, 0) << "capacity 1.0 should drop some assignments";
  std::vector<float> out = l.y;
  out.insert(out.end(), l.dh.begin(), l.dh.end());
  for (const ParamInfo& p : m.table.entries())
    out.insert(out.end(), m.grad(p.name), m.grad(p.name) + p.numel);
  return out;
}

uint64_t permutation_passes() {
  uint64_t version = 1;
  ExpertParallelShard ep;
  ep.bf16_version = &version;
  const ModelConfig cfg = llama_config();
  Harness m(cfg, ep, kN);
  return moe_test::phases_of_second_pass(m, kN, cfg.dim).calls[int(Phase::permutation)];
}

class MoeTokenSums : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!grouped_gemm_path_available(true, GroupedGemmPath::amx))
      GTEST_SKIP() << "no AMX on this CPU: the sums run over the stored rows there";
  }
};

TEST_F(MoeTokenSums, TheSumsRunInTheGemmStoresAtEpOne) {
  EXPECT_EQ(permutation_passes(), 2u);  // the two gathers; no combine, no scatter-add
  const ScopedGroupedGemmTokenSums off(false);
  EXPECT_EQ(permutation_passes(), 4u);
}

TEST_F(MoeTokenSums, SameBitsAsTheSumsOverStoredRows) {
  const std::vector<float> fused = run({});
  const ScopedGroupedGemmTokenSums off(false);
  EXPECT_EQ(fused, run({}));
}

TEST_F(MoeTokenSums, SameBitsAsTheExpertParallelPath) {
  MovingIdentity moving;
  EXPECT_EQ(run({}), run({0, 1, &moving}));
}

TEST_F(MoeTokenSums, SameBitsAsTheOverlappedParts) {
  ExpertParallelShard parts;
  parts.overlap_parts = 2;
  EXPECT_EQ(run({}), run(parts));
}

// The caller's local work (the llama block's shared experts, moe_parts.h LocalWork) runs once
// in each direction on the fused path too: an early return once skipped it there, so a
// model with shared experts lost them in bf16 one-thread ranks at ep 1.
TEST_F(MoeTokenSums, TheCallersLocalWorkRunsOnceInEachDirection) {
  Layer l({});
  int first = 0, last = 0;
  const LocalWork local{[&] { ++first; }, [&] { ++last; }};
  l.forward(local);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(last, 1);
  l.backward_input(local);
  EXPECT_EQ(first, 2);
  EXPECT_EQ(last, 2);
}

}  // namespace
}  // namespace mt
