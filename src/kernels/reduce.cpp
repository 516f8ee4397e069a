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

void sum_squares_each(const float* const* x, const size_t* n, size_t count, double* out) {
  double total = 0.0;  // each piece's reduction target in turn, shared by the team
#pragma omp parallel shared(total)
  for (size_t i = 0; i < count; ++i) {
    // sum_squares's loop, schedule and reduction as a worksharing loop of the one team: the
    // same share of the piece per thread, summed by the same vector code, then added into
    // total (with 2 threads a + b, in either order the same bits). The loop's closing
    // barrier makes the sum whole; the single's keeps the next piece from starting early.
    const float* xi = x[i];
    const long long len = static_cast<long long>(n[i]);
#pragma omp for simd reduction(+ : total) schedule(static)
    for (long long k = 0; k < len; k++) total += static_cast<double>(xi[k]) * xi[k];
#pragma omp single
    {
      out[i] = total;
      total = 0.0;
    }
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
