// Dropout as the blocks see it (--dropout P; docs/contracts.md §1): nanoGPT's three places,
// the embedding output, the attention probabilities and both residual branches, each with a
// mask that is a pure function of (seed, step, site, global token, feature)
// (kernels/dropout.h), so every layout draws one worker's masks and needs no RNG tracker.
// The chunk (model/chunk_dropout.h) points row_tokens at the running microbatch's tokens
// while it trains; evaluation and sampling leave it null: no dropout.
#pragma once

#include <cstdint>

#include "kernels/dropout.h"

namespace mt {

struct DropoutState {
  float p = 0;  // --dropout; 0: never on, and no buffers for it
  uint64_t seed = 0, step = 0;
  // The global token index of each of the microbatch's b*T rows (sequence of the global
  // batch * T + position); null outside training.
  const int64_t* row_tokens = nullptr;

  bool on() const { return p > 0 && row_tokens != nullptr; }
  // Sites: 0 the embedding; block `layer` 1 + 3*layer + {0 attention probabilities,
  // 1 attention branch, 2 MLP branch}.
  DropoutKey key(uint32_t site) const { return {seed, step, site}; }
  static uint32_t embedding_site() { return 0; }
  static uint32_t block_site(int layer, int which) {
    return 1 + 3 * uint32_t(layer) + uint32_t(which);
  }
};

}  // namespace mt
