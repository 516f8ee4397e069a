// Dropout as the blocks see it (--dropout P; docs/contracts.md §1): nanoGPT's three places,
// the embedding output, the attention probabilities and both residual branches, each with a
// mask that is a pure function of (seed, step, site, global token, feature)
// (kernels/dropout.h), so every layout, precision and block draws one worker's masks and
// needs no RNG tracker. A token's global index is (sequence in the global batch) * seq_len +
// its true position, so a context-parallel rank's zigzag rows draw what one worker's rows at
// those positions draw. The probabilities' feature is head * seq_len + the key's true
// position (kernels/flash_attention.h). The chunk (model/chunk_dropout.h) points row_tokens
// at the running microbatch's tokens while it trains; evaluation and sampling leave it
// null: no dropout.
#pragma once

#include <cstdint>

#include "kernels/dropout.h"
#include "kernels/flash_attention.h"

namespace mt {

struct DropoutState {
  float p = 0;  // --dropout; 0: never on, and no buffers for it
  uint64_t seed = 0, step = 0;
  int64_t seq_len = 0;  // the whole sequence's length (all cp ranks' rows)
  // The global token index of each of the microbatch's b*T rows; null outside training.
  const int64_t* row_tokens = nullptr;

  bool on() const { return p > 0 && row_tokens != nullptr; }
  // Sites: 0 the embedding; block `layer` 1 + 3*layer + {0 attention probabilities,
  // 1 attention branch, 2 MLP branch}.
  DropoutKey key(uint32_t site) const { return {seed, step, site}; }
  static uint32_t embedding_site() { return 0; }
  static uint32_t block_site(int layer, int which) {
    return 1 + 3 * uint32_t(layer) + uint32_t(which);
  }

  // The flash core's dropout on block `layer`'s probabilities (off unless on()); this rank's
  // query head 0 is global head head_offset (tensor parallelism).
  FlashDropout attention(int layer, int head_offset) const;
  // y (Nl, C) = x through site's mask (forward) or its gradient (backward: the same mask):
  // this rank's Nl rows of the residual stream, the microbatch's rows first_row.. (sequence
  // parallelism: rank * Nl). y may be x.
  void rows(float* y, const float* x, uint32_t site, int Nl, int C, int first_row,
            bool backward) const;
};

}  // namespace mt
