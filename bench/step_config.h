// The model configs bench_step times (the issue's), and the ModelConfig each stands for.
#pragma once

#include "model/gpt.h"

namespace mt::bench {

struct StepConfig {
  char name;
  int layers, dim, heads, seq, batch, vocab;
};
inline constexpr StepConfig kStepConfigs[] = {{'a', 4, 256, 8, 128, 8, 256},
                                              {'b', 6, 512, 8, 128, 8, 256}};

inline ModelConfig model_config(const StepConfig& bc) {
  ModelConfig cfg;
  cfg.layers = bc.layers, cfg.dim = bc.dim, cfg.heads = bc.heads;
  cfg.seq = bc.seq, cfg.vocab = bc.vocab;
  return cfg;
}

}  // namespace mt::bench
