#include <cmath>

#include "kernels/reference/reference.h"

namespace mt::ref {

double sum_squares(const float* x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += static_cast<double>(x[i]) * x[i];
  return s;
}

bool all_finite(const float* x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!std::isfinite(x[i])) return false;
  return true;
}

void scale_inplace(float* x, size_t n, float s) {
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

void add_inplace(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] += x[i];
}

}  // namespace mt::ref
