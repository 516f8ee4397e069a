#include "core/rng.h"

#include <cmath>

namespace mt {

double normal01(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = uniform01(seed, stream, 2 * index);
  double u2 = uniform01(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace mt
