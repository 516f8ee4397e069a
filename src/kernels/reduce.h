// Small vector reductions used by the trainer (gradient norm, finiteness, scaling).
#pragma once

#include <cstddef>

namespace mt {

// Sum of squares in double precision (the global-norm clip needs it exact enough that
// the order of shards does not matter at float precision).
double sum_squares(const float* x, size_t n);
// out[i] = sum_squares(x[i], n[i]) for i < count, bit for bit, in one OpenMP team: each
// piece is split over the team as sum_squares splits it (the same static shares and the same
// vector sums), where a call per piece would start and join a team per tensor, ~50 a step
// for the gradient norm, most of them a few hundred floats.
void sum_squares_each(const float* const* x, const size_t* n, size_t count, double* out);
bool all_finite(const float* x, size_t n);
void scale_inplace(float* x, size_t n, float s);
// y += x
void add_inplace(float* y, const float* x, size_t n);

}  // namespace mt
