#include "kernels/gemm_peak.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/timer.h"
#include "kernels/matmul.h"

namespace mt {

double measure_sgemm_peak_gflops(int threads, double seconds_budget) {
  // The best of many timed runs rather than the mean: the question is what the hardware can
  // sustain, and a neighbour only ever makes a run slower. Short runs are what make the
  // maximum robust: a 512^3 GEMM takes ~4 ms on one core, so dozens of them fit in a
  // fraction of a second and some land between a busy neighbour's time slices, where one
  // 2048^3 run (~0.2 s) is disturbed whenever the neighbour is.
  int saved_threads = omp_get_max_threads();
  omp_set_num_threads(threads < 1 ? 1 : threads);
  double best = 0.0;
  const int sizes[] = {512, 1024, 2048};
  const double per_size = seconds_budget / 3;
  for (int n : sizes) {
    const double flops = 2.0 * n * n * n;
    // A size whose single run would not fit its share of the budget (at the best rate seen
    // so far) is left out: the start-up measurement stays short, a benchmark runs them all.
    if (best > 0 && 2 * flops / (best * 1e9) > per_size) continue;
    std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
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
