// Small vector reductions used by the trainer (gradient norm, finiteness, scaling).
#pragma once

#include <cstddef>

namespace mt {

// Sum of squares in double precision (the global-norm clip needs it exact enough that
// the order of shards does not matter at float precision).
double sum_squares(const float* x, size_t n);
bool all_finite(const float* x, size_t n);
void scale_inplace(float* x, size_t n, float s);
// y += x
void add_inplace(float* y, const float* x, size_t n);

}  // namespace mt
