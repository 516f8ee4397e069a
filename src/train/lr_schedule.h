// Learning-rate schedule (docs/contracts.md §2). Update u (0-based) of `steps`:
//   u < warmup:               lr * (u + 1) / warmup                      (nanoGPT's warmup)
//   constant:                 lr
//   cosine, warmup <= u:      min_lr + 0.5 (lr - min_lr) (1 + cos(pi * (u - warmup) / span)),
//                             span = steps - 1 - warmup, so the last update uses min_lr
//                             (span <= 0: lr).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mt {

enum class LrKind { constant, cosine };

// The names --lr-schedule takes.
inline std::vector<std::pair<std::string, LrKind>> lr_kind_names() {
  return {{"constant", LrKind::constant}, {"cosine", LrKind::cosine}};
}

inline const char* lr_kind_name(LrKind k) {
  return k == LrKind::constant ? "constant" : "cosine";
}

struct LrSchedule {
  LrKind kind = LrKind::cosine;
  double lr = 1e-3, min_lr = 0;
  int warmup = 0, steps = 1;
  double at(int update) const;
};

}  // namespace mt
