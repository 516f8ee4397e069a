// Learning-rate schedule (docs/contracts.md §2). Update u (0-based) of `steps`:
//   u < warmup:               lr * (u + 1) / warmup                      (nanoGPT's warmup)
//   constant:                 lr
//   cosine, warmup <= u:      min_lr + 0.5 (lr - min_lr) (1 + cos(pi * (u - warmup) / span)),
//                             span = steps - 1 - warmup, so the last update uses min_lr
//                             (span <= 0: lr).
#pragma once

#include <string>

namespace mt {

struct LrSchedule {
  std::string kind = "cosine";
  double lr = 1e-3, min_lr = 0;
  int warmup = 0, steps = 1;
  double at(int update) const;
};

}  // namespace mt
