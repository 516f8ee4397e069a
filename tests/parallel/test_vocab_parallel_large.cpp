// The vocabulary-parallel embedding and loss at Llama 3's vocabulary (V = 128,256) and at
// one more (128,257, which tp 4 pads to 128,260): forward and backward of the whole model
// at tp 2 and 4, with and without sequence parallelism, give tp 1's loss and gradients,
// and the padding rows get no gradient. Both blocks: gpt2 (tied table) and llama (the
// embedding and an untied lm_head, each split by vocabulary rows). The model is tiny
// (C = 16, T = 8) so the (b*T, V) logits stay small; only the vocabulary is large.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "comm/world.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mt {
namespace {

ModelConfig large_vocab_config(int vocab, Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.layers = 1, c.dim = 16, c.heads = 4, c.seq = 8, c.vocab = vocab;
  return c;
}

// Ids spread over the vocabulary, plus those next to every rank's shard boundary at tp 2
// and 4 and the last real id (next to the padding).
std::vector<int> ids_near_boundaries(int V, int n, uint64_t stream) {
  std::vector<int> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[size_t(i)] = int(uniform01(9, stream, uint64_t(i)) * V);
  std::vector<int> edges = {V - 1, 0};
  for (int t : {2, 4})
    for (int r = 1; r < t; ++r) {
      const int64_t start = tp::vocab_shard(V, t, r).start;
      if (start < V) edges.push_back(int(start)), edges.push_back(int(start - 1));
    }
  for (size_t k = 0; k < edges.size() && k < ids.size(); ++k) ids[k * 2 % ids.size()] = edges[k];
  return ids;
}

struct ModelGrads {
  double loss = 0;
  std::map<std::string, std::vector<double>> grads;  // global shape, summed over tp ranks
  bool padding_grads_zero = true;
};

// One microbatch of forward + backward on t ranks (one tp group); the gradients in the
// global view: split tensors assembled from their owners, partial ones (sequence-parallel
// LayerNorm) summed, replicated ones taken from rank 0 after checking every rank agrees.
ModelGrads run_model(const ModelConfig& cfg, int t, bool sp, const std::vector<int>& tokens,
                     const std::vector<int>& targets, int b) {
  std::vector<double> losses(static_cast<size_t>(t));
  std::vector<std::map<std::string, std::vector<double>>> grads(static_cast<size_t>(t));
  std::vector<bool> padding_zero(static_cast<size_t>(t), true);
  std::map<std::string, bool> whole;  // the gradient is whole on every rank
  auto body = [&](const TensorParallelShard& tp) {
    GPT m(cfg, GPT::whole_model(cfg), tp, b);
    m.init(5);
    losses[size_t(tp.rank)] =
        m.train_microbatch(tokens.data(), targets.data(), b, cfg.seq, 1.f / float(b * cfg.seq));
    for (const ParamInfo& p : m.table().entries()) {
      std::vector<double>& g = grads[size_t(tp.rank)][p.name];
      g.assign(size_t(p.global_numel()), 0.0);
      p.for_each_element(
          [&](size_t l, int64_t e) { g[size_t(e)] = m.grads().data()[p.offset + l]; });
      // Replicated, except under sequence parallelism LayerNorm's, which covers the
      // rank's rows only (tp_partial_grad) and is summed.
      if (tp.rank == 0) whole[p.name] = p.shard.replicated() && !p.tp_partial_grad;
    }
    const tp::VocabShard s = tp::vocab_shard(cfg.vocab, tp.size, tp.rank);
    for (const char* table : {cfg.token_table_name(), cfg.head_weight_name()}) {
      const ParamInfo& w = m.table().at(table);
      for (size_t i = size_t(s.real) * size_t(cfg.dim); i < w.numel; ++i)
        if (m.grads().data()[w.offset + i] != 0.f) padding_zero[size_t(tp.rank)] = false;
    }
  };
  if (t == 1)
    body(TensorParallelShard{});
  else
    run_local(t, WorldOptions{}, [&](CommWorld& w) {
      body(TensorParallelShard{w.rank(), t, w.world().get(), sp});
    });
  ModelGrads out;
  out.loss = losses[0];
  for (const auto& [name, g0] : grads[0]) {
    std::vector<double>& sum = out.grads[name];
    sum.assign(g0.size(), 0.0);
    for (int r = 0; r < t; ++r) {
      const std::vector<double>& g = grads[size_t(r)].at(name);
      if (whole.at(name)) {
        EXPECT_EQ(g, g0) << name << ": replicated gradient differs by rank";
      }
      for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
    }
    if (whole.at(name)) sum = g0;
  }
  for (int r = 0; r < t; ++r) {
    EXPECT_EQ(losses[size_t(r)], losses[0]) << "every rank computes the loss of every token";
    out.padding_grads_zero = out.padding_grads_zero && padding_zero[size_t(r)];
  }
  return out;
}

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, m = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::fabs(a[i] - b[i]));
    m = std::max(m, std::fabs(b[i]));
  }
  return d / m;
}

class LargeVocabParallel : public ::testing::TestWithParam<std::tuple<int, Arch>> {};

TEST_P(LargeVocabParallel, LossAndGradientsEqualOneRank) {
  const ModelConfig cfg = large_vocab_config(std::get<0>(GetParam()), std::get<1>(GetParam()));
  cfg.validate();  // --vocab far above 65,536 is a valid model
  const int b = 2, N = b * cfg.seq;
  const std::vector<int> tokens = ids_near_boundaries(cfg.vocab, N, 1);
  const std::vector<int> targets = ids_near_boundaries(cfg.vocab, N, 2);
  const ModelGrads one = run_model(cfg, 1, false, tokens, targets, b);
  // Uniform-ish initial predictions over V ids: the loss is about log V.
  EXPECT_NEAR(one.loss / N, std::log(double(cfg.vocab)), 0.5);
  for (int t : {2, 4})
    for (bool sp : {false, true}) {
      SCOPED_TRACE("tp " + std::to_string(t) + (sp ? " sp" : ""));
      const ModelGrads got = run_model(cfg, t, sp, tokens, targets, b);
      EXPECT_NEAR(got.loss, one.loss, 1e-6 * one.loss);
      EXPECT_TRUE(got.padding_grads_zero);
      for (const auto& [name, want] : one.grads)
        EXPECT_LT(rel_err(got.grads.at(name), want), 1e-5) << name;
    }
}

// 128,256 = 4 * 32,064: no padding at tp 2 or 4. 128,257 is odd: tp 2 pads it to 128,258,
// tp 4 to 128,260 (the last rank holds 32,062 real rows and 3 of padding); the llama block
// runs there, where both of its vocabulary tables are padded.
INSTANTIATE_TEST_SUITE_P(Vocabularies, LargeVocabParallel,
                         ::testing::Values(std::make_tuple(128256, Arch::gpt2),
                                           std::make_tuple(128257, Arch::gpt2),
                                           std::make_tuple(128257, Arch::llama)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Arch>>& i) {
                           std::string name = arch_name(std::get<1>(i.param));
                           name += "_V";
                           return name += std::to_string(std::get<0>(i.param));
                         });

// The vocabulary split stays exact up to --vocab 2^31-1, where the padded vocabulary no
// longer fits int32.
TEST(VocabShard, LargestVocabularyPartitionsExactly) {
  const int64_t V = 2147483647;
  for (int t : {1, 2, 3, 4, 8, 64}) {
    SCOPED_TRACE("tp " + std::to_string(t));
    const int64_t padded = tp::padded_vocab(V, t);
    EXPECT_EQ(padded % t, 0);
    EXPECT_GE(padded, V);
    EXPECT_LT(padded - V, t);
    int64_t real = 0;
    for (int r = 0; r < t; ++r) {
      const tp::VocabShard s = tp::vocab_shard(V, t, r);
      EXPECT_EQ(s.start, int64_t(r) * s.rows);
      EXPECT_EQ(int64_t(s.rows) * t, padded);
      EXPECT_GE(s.real, 0);
      real += s.real;
    }
    EXPECT_EQ(real, V);
  }
  const tp::VocabShard s128 = tp::vocab_shard(128257, 4, 3);
  EXPECT_EQ(s128.start, 96195);
  EXPECT_EQ(s128.rows, 32065);
  EXPECT_EQ(s128.real, 32062);
}

}  // namespace
}  // namespace mt
