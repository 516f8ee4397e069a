// Column sums over all rows, split among the OpenMP team by columns: each thread owns a
// contiguous range (a multiple of 16 wide, so no two threads share a cache line of the sums)
// and walks it in chunks of at most `chunk` columns, each summed over every row front to back
// (a stream the prefetcher follows). The per-column order does not depend on the team size.
// The bias gradient (bias_grad.cpp) and the norms' weight gradients (layernorm.cpp,
// rmsnorm.cpp) run their chunks through it.
#pragma once

#include <omp.h>

#include <algorithm>

namespace mt {

// f(c0, c1) for consecutive chunks [c0, c1) of [0, C), from inside one parallel region.
template <class ChunkFn>
void for_each_column_chunk(int C, int chunk, ChunkFn f) {
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int per = ((C + threads - 1) / threads + 15) / 16 * 16;
    const int begin = std::min(C, t * per), end = std::min(C, begin + per);
    for (int c0 = begin; c0 < end; c0 += chunk) f(c0, std::min(end, c0 + chunk));
  }
}

}  // namespace mt
