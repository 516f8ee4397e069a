#include "plan/zero3_overlap.h"

#include <algorithm>
#include <vector>

namespace mt::plan {

// Both streams played block by block: before block i computes, the gathers up to block
// i + prefetch are issued (each when the comm stream is free and its buffer is: block
// j - prefetch - 1 has computed); block i computes once its gather has ended; its
// reduce-scatter follows its compute on the comm stream.
double zero3_pass_exposed(const Zero3Pass& p, int blocks, int prefetch) {
  const int n = std::max(blocks, 1), ahead = std::max(prefetch, 0);
  std::vector<double> gathered(size_t(n), 0.0), done(size_t(n), 0.0);
  double comm = 0, compute = 0;
  int issued = 0;
  for (int i = 0; i < n; ++i) {
    for (; issued <= std::min(i + ahead, n - 1); ++issued) {
      const int reused = issued - ahead - 1;
      comm = std::max(comm, reused >= 0 ? done[size_t(reused)] : 0.0) + p.gather;
      gathered[size_t(issued)] = comm;
    }
    compute = std::max(compute, gathered[size_t(i)]) + p.compute;
    done[size_t(i)] = compute;
    if (p.scatter > 0) comm = std::max(comm, compute) + p.scatter;
  }
  return std::max(compute, comm) - n * p.compute;
}

}  // namespace mt::plan
