// The sampler draws only ids its caller can decode: a model may have more rows than its
// tokenizer has pieces (a vocabulary padded past the tokenizer, or --vocab given larger
// than a dataset's), and an id past the pieces would stop `meshtrain sample` mid-text.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "model/sampler.h"

namespace mt {
namespace {

TEST(Sampler, DrawsOnlyIdsBelowTheDecodableVocabulary) {
  ModelConfig cfg;
  cfg.layers = 1, cfg.dim = 16, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 5000;
  GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 1);
  model.init(3);
  SampleOptions so;
  so.tokens = 40;
  so.temperature = 1.f;
  // Every row drawn from: an untrained model spreads its mass over all 5,000 rows.
  const std::vector<int> any = sample(model, {1, 2, 3}, so);
  EXPECT_GT(*std::max_element(any.begin() + 3, any.end()), 300);
  for (float temperature : {1.f, 0.f}) {
    for (int top_k : {0, 5}) {
      so.vocab = 300;
      so.temperature = temperature;
      so.top_k = top_k;
      const std::vector<int> out = sample(model, {1, 2, 3}, so);
      ASSERT_EQ(out.size(), 43u);
      EXPECT_LT(*std::max_element(out.begin(), out.end()), 300)
          << "temperature " << temperature << " top-k " << top_k;
    }
  }
  so.vocab = 7000;  // more than the rows: every row
  so.temperature = 1.f, so.top_k = 0;
  EXPECT_EQ(sample(model, {1, 2, 3}, so), any);
}

}  // namespace
}  // namespace mt
