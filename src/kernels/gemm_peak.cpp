#include "kernels/gemm_peak.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <vector>

#include "core/timer.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"

namespace mt {

namespace {

constexpr int kSizes[] = {512, 1024, 2048};
constexpr double kWarmupShare = 0.25;
constexpr int kMinWarmupRuns = 3;

// One n^3 product of the precision's routine, on buffers it owns.
class SquareGemm {
 public:
  SquareGemm(PeakPrecision p, int n) : p_(p), n_(n) {
    const size_t e = size_t(n) * n;
    c_.assign(e, 0.0f);
    if (p == PeakPrecision::fp32)
      a_.assign(e, 0.5f), b_.assign(e, 0.25f);
    else
      a16_.assign(e, float_to_bf16(0.5f)), b16_.assign(e, float_to_bf16(0.25f));
  }
  void run() {
    if (p_ == PeakPrecision::fp32)
      sgemm(false, false, n_, n_, n_, 1.0f, a_.data(), n_, b_.data(), n_, 0.0f, c_.data(), n_);
    else
      matmul_bf16_forward(c_.data(), a16_.data(), b16_.data(), nullptr, n_, n_, n_);
  }
  double flops() const { return 2.0 * n_ * n_ * double(n_); }

 private:
  PeakPrecision p_;
  int n_;
  std::vector<float> a_, b_, c_;
  std::vector<bf16> a16_, b16_;
};

// Untimed runs until `seconds` have passed (and at least kMinWarmupRuns): see the header,
// step 3. Returns the best rate seen, which lets step 4 skip sizes that cannot fit.
double warm_up(SquareGemm& g, double seconds) {
  double best = 0;
  Stopwatch budget;
  for (int runs = 0; runs < kMinWarmupRuns || budget.elapsed() < seconds; ++runs) {
    Stopwatch sw;
    g.run();
    best = std::max(best, g.flops() / sw.elapsed() * 1e-9);
  }
  return best;
}

// Step 4: the best rate of repeated runs of each size, and the size it came from.
GemmPeak timed_sizes(PeakPrecision p, double seconds, double rate_hint) {
  GemmPeak peak;
  const double per_size = seconds / std::size(kSizes);
  for (int n : kSizes) {
    SquareGemm g(p, n);
    const double rate = std::max(rate_hint, peak.gflops);
    // A size whose warm-up run plus one timed run would not fit its slot is left out.
    if (rate > 0 && 2 * g.flops() / (rate * 1e9) > per_size) continue;
    g.run();  // first touch of this size's buffers (and, for bf16, its primitive)
    Stopwatch slot;
    do {
      Stopwatch sw;
      g.run();
      const double gflops = g.flops() / sw.elapsed() * 1e-9;
      if (gflops > peak.gflops) peak.gflops = gflops, peak.n = n;
    } while (slot.elapsed() < per_size);
  }
  return peak;
}

}  // namespace

GemmPeak measure_gemm_peak(PeakPrecision precision, int threads, double seconds_budget) {
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(threads < 1 ? 1 : threads);
  SquareGemm first(precision, kSizes[0]);
  const double hint = warm_up(first, kWarmupShare * seconds_budget);
  GemmPeak peak = timed_sizes(precision, (1 - kWarmupShare) * seconds_budget, hint);
  peak.kernel = precision == PeakPrecision::fp32 ? "oneDNN sgemm" : matmul_bf16_isa();
  omp_set_num_threads(saved_threads);
  return peak;
}

std::string describe_gemm_peak(PeakPrecision precision, const GemmPeak& peak, int threads) {
  char line[256];
  std::snprintf(line, sizeof line,
                "%s GEMM peak %.1f GFLOP/s per thread (%s, best run %d^3 of square "
                "512/1024/2048 runs after a warm-up, wall time, %d thread(s))",
                precision == PeakPrecision::fp32 ? "fp32" : "bf16", peak.gflops / threads,
                peak.kernel.c_str(), peak.n, threads);
  return line;
}

double measure_sgemm_peak_gflops(int threads, double seconds_budget) {
  return measure_gemm_peak(PeakPrecision::fp32, threads, seconds_budget).gflops;
}

double measure_bf16_gemm_peak_gflops(int threads, double seconds_budget) {
  return measure_gemm_peak(PeakPrecision::bf16, threads, seconds_budget).gflops;
}

}  // namespace mt
