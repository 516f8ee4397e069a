// The whole tensor-parallel model (embedding, blocks, head, loss) in one microbatch: the
// same loss and gradients as one worker, and exactly the communication volume the
// Megatron formulas give, read from the tp communicator's byte counter.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "comm/world.h"
#include "core/rng.h"
#include "model/gpt.h"

namespace mt {
namespace {

struct ModelRun {
  double loss = 0;
  uint64_t bytes = 0;
  std::vector<float> wte_grad;  // global [V, C], assembled over the ranks
};

TEST(TensorParallelModel, LossGradientsAndVolumeMatchTheory) {
  ModelConfig cfg;
  cfg.layers = 2, cfg.dim = 32, cfg.heads = 4, cfg.seq = 16, cfg.vocab = 61;
  const int b = 2, N = b * cfg.seq, C = cfg.dim, L = cfg.layers;
  std::vector<int> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) {
    tokens[i] = int(uniform01(7, 1, i) * cfg.vocab);
    targets[i] = int(uniform01(7, 2, i) * cfg.vocab);
  }
  const float dloss = 1.f / float(N);

  auto run = [&](int t, bool sp) {
    ModelRun out;
    out.wte_grad.assign(size_t(cfg.vocab) * C, 0.f);
    std::vector<double> losses(t);
    std::vector<uint64_t> bytes(t);
    std::vector<std::vector<float>> wte(t, std::vector<float>(out.wte_grad.size(), 0.f));
    auto body = [&](const TensorParallelShard& tp) {
      GPT m(cfg, GPT::whole_model(cfg), tp, b);
      m.init(3);
      const uint64_t b0 = tp.comm ? tp.comm->stats().bytes_sent : 0;
      losses[tp.rank] = m.train_microbatch(tokens.data(), targets.data(), b, cfg.seq, dloss);
      bytes[tp.rank] = (tp.comm ? tp.comm->stats().bytes_sent : 0) - b0;
      const ParamInfo& w = m.table().at("transformer.wte.weight");
      w.for_each_element(
          [&](size_t l, int64_t g) { wte[tp.rank][size_t(g)] = m.grads().data()[w.offset + l]; });
    };
    if (t == 1)
      body(TensorParallelShard{});
    else
      run_local(t, WorldOptions{}, [&](CommWorld& w) {
        body(TensorParallelShard{w.rank(), t, w.world().get(), sp});
      });
    for (int r = 0; r < t; ++r) {
      EXPECT_EQ(losses[r], losses[0]) << "every rank computes the loss of every token";
      EXPECT_EQ(bytes[r], bytes[0]);
      for (size_t i = 0; i < out.wte_grad.size(); ++i) out.wte_grad[i] += wte[r][i];
    }
    out.loss = losses[0];
    out.bytes = bytes[0];
    return out;
  };

  const ModelRun one = run(1, false);
  EXPECT_EQ(one.bytes, 0u);
  for (int t : {2, 4})
    for (bool sp : {false, true}) {
      SCOPED_TRACE("tp " + std::to_string(t) + (sp ? " sp" : ""));
      const ModelRun got = run(t, sp);
      EXPECT_NEAR(got.loss, one.loss, 1e-5 * one.loss);
      double err = 0, ref = 1e-30;
      for (size_t i = 0; i < one.wte_grad.size(); ++i) {
        err = std::max(err, double(std::fabs(got.wte_grad[i] - one.wte_grad[i])));
        ref = std::max(ref, double(std::fabs(one.wte_grad[i])));
      }
      EXPECT_LT(err / ref, 1e-5);
      // Bytes per rank: all-reduce 2(t-1)/t of its buffer, all-gather / reduce-scatter
      // (t-1)/t. Per layer 4 all-reduces of the (b*T, C) activation (sequence parallelism:
      // the same volume as gathers + scatters, plus W's 4 re-gathers); embedding and head
      // one more each; the loss an all-reduce(max) of b*T and an all-reduce(sum) of 2*b*T.
      const uint64_t act = uint64_t(N) * C * 4, ar = 2 * (t - 1) * act / t, ag = (t - 1) * act / t;
      const uint64_t loss_bytes = 2 * (t - 1) * uint64_t(3 * N) * 4 / t;
      const uint64_t want = L * (4 * ar + (sp ? 4 * ag : 0)) + 2 * ar + loss_bytes;
      EXPECT_EQ(got.bytes, want);
    }
}

}  // namespace
}  // namespace mt
