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
  const int V = opts.vocab > 0 ? std::min(opts.vocab, cfg.vocab) : cfg.vocab;  // ids drawn from
  ModelChunk& chunk = model.chunk(0);
  std::vector<double> probs(static_cast<size_t>(V));
  for (int i = 0; i < opts.tokens; ++i) {
    const int T = std::min<int>(int(context.size()), cfg.seq);
    const int* window = context.data() + context.size() - T;
    int slot = chunk.pool().acquire();
    chunk.forward(slot, window, nullptr, 1, T, 0.f);
    // The last row's logits; a row is cfg.vocab wide, the draw reads its first V.
    const float* logits = chunk.logits(slot) + size_t(T - 1) * size_t(cfg.vocab);
    int next = 0;
    if (opts.temperature <= 0) {
      next = int(std::max_element(logits, logits + V) - logits);
    } else {
      float cutoff = -INFINITY;
      if (opts.top_k > 0 && opts.top_k < V) {
        std::vector<float> sorted(logits, logits + V);
        std::nth_element(sorted.begin(), sorted.begin() + (opts.top_k - 1), sorted.end(),
                         std::greater<float>());
        cutoff = sorted[opts.top_k - 1];
      }
      const float mx = *std::max_element(logits, logits + V);
      double total = 0;
      for (int v = 0; v < V; ++v) {
        probs[v] = logits[v] < cutoff ? 0.0 : std::exp((logits[v] - mx) / opts.temperature);
        total += probs[v];
      }
      double u = uniform01(opts.seed, 0x5a4d, uint64_t(i)) * total;
      next = V - 1;
      for (int v = 0; v < V; ++v) {
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
