// Autoregressive sampling from a whole-model GPT (one worker), so a user can see what the
// model learned.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt.h"

namespace mt {

struct SampleOptions {
  int tokens = 200;          // new tokens to generate
  float temperature = 0.8f;  // 0 = greedy
  int top_k = 0;             // 0 = whole vocabulary
  uint64_t seed = 1337;
  // Ids drawn from: 0..min(vocab, rows)-1. The tokenizer's pieces, when the model has more
  // rows (a vocabulary padded past the tokenizer, as nanoGPT's 50,304 for GPT-2's 50,257),
  // so every id drawn can be decoded. 0: every row.
  int vocab = 0;
};

// Extends `context` by opts.tokens tokens; the window is the last cfg.seq tokens.
// on_token (optional) is called with each new token as it is produced.
std::vector<int> sample(GPT& model, std::vector<int> context, const SampleOptions& opts,
                        const std::function<void(int)>& on_token = {});

}  // namespace mt
