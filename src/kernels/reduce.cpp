#include "kernels/reduce.h"

#include <cstdint>
#include <cstring>

namespace mt {

double sum_squares(const float* x, size_t n) {
  long long count = static_cast<long long>(n);
  double total = 0.0;
#pragma omp parallel for simd reduction(+ : total) schedule(static)
  for (long long i = 0; i < count; i++) total += static_cast<double>(x[i]) * x[i];
  return total;
}

bool all_finite(const float* x, size_t n) {
  // Counts elements whose exponent bits are all ones (inf or NaN); a bit test instead of
  // std::isfinite keeps the loop vectorised and immune to -ffinite-math style assumptions.
  long long count = static_cast<long long>(n);
  long long bad = 0;
#pragma omp parallel for simd reduction(+ : bad) schedule(static)
  for (long long i = 0; i < count; i++) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    bad += (bits & 0x7f800000u) == 0x7f800000u;
  }
  return bad == 0;
}

void scale_inplace(float* x, size_t n, float s) {
  long long count = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < count; i++) x[i] *= s;
}

void add_inplace(float* y, const float* x, size_t n) {
  long long count = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < count; i++) y[i] += x[i];
}

}  // namespace mt
