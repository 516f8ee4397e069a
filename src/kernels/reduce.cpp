#include "kernels/reduce.h"

#include <omp.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace mt {

double sum_squares(const float* x, size_t n) {
  long long count = static_cast<long long>(n);
  double total = 0.0;
#pragma omp parallel for simd reduction(+ : total) schedule(static)
  for (long long i = 0; i < count; i++) total += static_cast<double>(x[i]) * x[i];
  return total;
}

void sum_squares_each(const float* const* x, const size_t* n, size_t count, double* out) {
  // Each thread sums its share of every piece, the share sum_squares's static schedule gives
  // it (the first len % team threads one more), with the same vector loop, and writes the
  // partial; one barrier, at the region's end, for all the pieces (a worksharing loop per
  // piece would meet the team twice a piece). The partials are then added to 0 in thread
  // order: with 2 threads (0 + a) + b, sum_squares's reduction in either order.
  const int most = omp_get_max_threads();
  std::vector<double> partial(count * size_t(most), 0.0);
  int team = 1;
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    if (t == 0) team = nt;
    for (size_t i = 0; i < count; ++i) {
      const long long len = static_cast<long long>(n[i]), q = len / nt, r = len % nt;
      const long long lo = q * t + (t < r ? t : r), hi = lo + q + (t < r ? 1 : 0);
      const float* xi = x[i];
      double s = 0.0;
#pragma omp simd reduction(+ : s)
      for (long long k = lo; k < hi; k++) s += static_cast<double>(xi[k]) * xi[k];
      partial[i * size_t(most) + size_t(t)] = s;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    double s = 0.0;
    for (int t = 0; t < team; ++t) s += partial[i * size_t(most) + size_t(t)];
    out[i] = s;
  }
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
