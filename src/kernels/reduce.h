// Small vector reductions used by the trainer (gradient norm, finiteness, scaling).
#pragma once

#include <cstddef>

namespace mt {

// Sum of squares in double precision (the global-norm clip needs it exact enough that
// the order of shards does not matter at float precision).
double sum_squares(const float* x, size_t n);
// out[i] = sum_squares(x[i], n[i]) for i < count, in one OpenMP team that meets once: each
// thread sums the share of every piece that sum_squares's schedule gives it, with the same
// vector loop, and the shares are added in thread order, so 1 and 2 threads give
// sum_squares's bits (at 3 or more sum_squares adds the shares as threads arrive). A call per
// piece started a team and met at its end for every tensor, ~50 a step for the gradient norm.
void sum_squares_each(const float* const* x, const size_t* n, size_t count, double* out);
bool all_finite(const float* x, size_t n);
void scale_inplace(float* x, size_t n, float s);
// y += x
void add_inplace(float* y, const float* x, size_t n);

}  // namespace mt
