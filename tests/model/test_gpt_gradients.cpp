// The model's composed backward (every block's B and W halves, the tied head, the
// embedding) against central finite differences of the loss, on a tiny model.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "model/gpt.h"

namespace mt {
namespace {

struct Tiny {
  ModelConfig cfg;
  std::vector<int> tokens, targets;
  int b = 2;
  Tiny() {
    cfg.layers = 2, cfg.dim = 16, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 11;
    for (int i = 0; i < b * cfg.seq; ++i) {
      tokens.push_back(int(uniform01(3, 1, i) * cfg.vocab));
      targets.push_back(int(uniform01(3, 2, i) * cfg.vocab));
    }
  }
};

double mean_loss(GPT& m, const Tiny& t) {
  return m.eval_microbatch(t.tokens.data(), t.targets.data(), t.b, t.cfg.seq) / (t.b * t.cfg.seq);
}

TEST(GPTGradients, MatchFiniteDifferences) {
  Tiny t;
  GPT m(t.cfg, GPT::whole_model(t.cfg), TensorParallelShard{}, t.b);
  m.init(5);
  // Larger weights than the init so every path carries signal (LayerNorm gains, biases).
  float* p = m.params().data();
  for (size_t i = 0; i < m.table().total(); ++i) p[i] += float(0.3 * normal01(9, 9, i));
  m.zero_grads();
  m.train_microbatch(t.tokens.data(), t.targets.data(), t.b, t.cfg.seq, 1.0f / (t.b * t.cfg.seq));
  const float* g = m.grads().data();
  int checked = 0;
  for (const ParamInfo& info : m.table().entries()) {
    // A few elements of every tensor.
    for (size_t k = 0; k < 3; ++k) {
      size_t i = info.offset + (k * 7919) % info.numel;
      const float saved = p[i];
      const float h = 1e-2f;
      p[i] = saved + h;
      double up = mean_loss(m, t);
      p[i] = saved - h;
      double down = mean_loss(m, t);
      p[i] = saved;
      double fd = (up - down) / (2 * h);
      double tol = 2e-3 + 2e-2 * std::fabs(fd);
      EXPECT_NEAR(g[i], fd, tol) << info.name << "[" << i - info.offset << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, int(3 * m.table().entries().size()));
}

TEST(GPTGradients, AccumulateOverMicrobatches) {
  // Two calls accumulate: grads after (mb, mb) equal twice the grads after (mb), up to the
  // rounding of GEMMs that add into the existing gradient block by block.
  Tiny t;
  GPT m(t.cfg, GPT::whole_model(t.cfg), TensorParallelShard{}, t.b);
  m.init(5);
  const float d = 1.0f / (t.b * t.cfg.seq);
  m.zero_grads();
  m.train_microbatch(t.tokens.data(), t.targets.data(), t.b, t.cfg.seq, d);
  std::vector<float> once(m.grads().data(), m.grads().data() + m.table().total());
  m.train_microbatch(t.tokens.data(), t.targets.data(), t.b, t.cfg.seq, d);
  for (size_t i = 0; i < once.size(); ++i)
    ASSERT_NEAR(m.grads().data()[i], 2 * once[i], 1e-6 + 1e-5 * std::fabs(2 * once[i])) << i;
}

TEST(GPTGradients, ActivationSlotsAreReused) {
  Tiny t;
  GPT m(t.cfg, GPT::whole_model(t.cfg), TensorParallelShard{}, t.b);
  m.init(5);
  for (int i = 0; i < 3; ++i)
    m.train_microbatch(t.tokens.data(), t.targets.data(), t.b, t.cfg.seq, 0.01f);
  EXPECT_EQ(m.chunk(0).pool().peak_slots(), 1);
  EXPECT_GT(m.activation_peak_bytes(), 0u);
}

}  // namespace
}  // namespace mt
