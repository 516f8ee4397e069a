// The small GPT the data-parallel bucket tests train on 2 ranks (4 blocks, d 32, 2 heads, seq
// 8, vocab 19, microbatches of 2 sequences), and its token streams.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "model/config.h"

namespace mt::dp_bucket_model {

constexpr int kB = 2, kDp = 2, kLayers = 4;

inline ModelConfig config() {
  ModelConfig cfg;
  cfg.layers = kLayers, cfg.dim = 32, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 19;
  return cfg;
}

// n tokens of stream `stream` under `seed`, uniform over the vocabulary.
inline std::vector<int> tokens(int n, uint64_t seed, uint64_t stream) {
  std::vector<int> t;
  for (int i = 0; i < n; ++i) t.push_back(int(uniform01(seed, stream, i) * config().vocab));
  return t;
}

}  // namespace mt::dp_bucket_model
