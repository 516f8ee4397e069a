#include "model/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace mt {

std::vector<int> sample(GPT& model, std::vector<int> context, const SampleOptions& opts,
                        const std::function<void(int)>& on_token) {
  const ModelConfig& cfg = model.config();
  MT_REQUIRE(!context.empty(), "the prompt must hold at least one token");
  ModelChunk& chunk = model.chunk(0);
  std::vector<double> probs(cfg.vocab);
  for (int i = 0; i < opts.tokens; ++i) {
    const int T = std::min<int>(int(context.size()), cfg.seq);
    const int* window = context.data() + context.size() - T;
    int slot = chunk.pool().acquire();
    chunk.forward(slot, window, nullptr, 1, T, 0.f);
    const float* logits = chunk.logits(slot) + size_t(T - 1) * cfg.vocab;
    int next = 0;
    if (opts.temperature <= 0) {
      next = int(std::max_element(logits, logits + cfg.vocab) - logits);
    } else {
      float cutoff = -INFINITY;
      if (opts.top_k > 0 && opts.top_k < cfg.vocab) {
        std::vector<float> sorted(logits, logits + cfg.vocab);
        std::nth_element(sorted.begin(), sorted.begin() + (opts.top_k - 1), sorted.end(),
                         std::greater<float>());
        cutoff = sorted[opts.top_k - 1];
      }
      const float mx = *std::max_element(logits, logits + cfg.vocab);
      double total = 0;
      for (int v = 0; v < cfg.vocab; ++v) {
        probs[v] = logits[v] < cutoff ? 0.0 : std::exp((logits[v] - mx) / opts.temperature);
        total += probs[v];
      }
      double u = uniform01(opts.seed, 0x5a4d, uint64_t(i)) * total;
      next = cfg.vocab - 1;
      for (int v = 0; v < cfg.vocab; ++v) {
        u -= probs[v];
        if (u <= 0) {
          next = v;
          break;
        }
      }
    }
    chunk.pool().release(slot);
    context.push_back(next);
    if (on_token) on_token(next);
  }
  return context;
}

}  // namespace mt
