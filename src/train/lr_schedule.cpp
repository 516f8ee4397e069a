#include "train/lr_schedule.h"

#include <cmath>

namespace mt {

double LrSchedule::at(int u) const {
  if (u < warmup) return lr * (u + 1) / warmup;
  if (kind == LrKind::constant) return lr;
  const int span = steps - 1 - warmup;
  if (span <= 0) return lr;
  const double progress = double(u - warmup) / span;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace mt
