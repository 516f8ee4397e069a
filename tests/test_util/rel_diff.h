// How far a tensor is from its reference: the largest |got - want| relative to the largest
// |want| of the tensor (a tensor of zeros compares absolutely, to within 1e-12).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace mt::test_util {

inline double max_rel_diff(const float* got, const float* want, size_t n) {
  double diff = 0, scale = 1e-12;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return diff / scale;
}

}  // namespace mt::test_util
