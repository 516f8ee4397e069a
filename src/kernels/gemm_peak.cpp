#include "kernels/gemm_peak.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/timer.h"
#include "kernels/matmul.h"

namespace mt {

double measure_sgemm_peak_gflops(int threads, double seconds_budget) {
  // The best of several timed runs rather than the mean: the question is what the hardware
  // can sustain, and a noisy neighbour only ever makes a run slower.
  int saved_threads = omp_get_max_threads();
  omp_set_num_threads(threads < 1 ? 1 : threads);
  double best = 0.0;
  const int sizes[] = {1024, 2048};
  double per_size = seconds_budget / 2;
  for (int n : sizes) {
    std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
    const double flops = 2.0 * n * n * n;
    sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm-up
    Stopwatch budget;
    do {
      Stopwatch sw;
      sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      best = std::max(best, flops / sw.elapsed() * 1e-9);
    } while (budget.elapsed() < per_size);
  }
  omp_set_num_threads(saved_threads);
  return best;
}

}  // namespace mt
