#include "kernels/gemm_peak.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <vector>

#include "core/timer.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "kernels/peak_settling.h"

namespace mt {

namespace {

constexpr int kSizes[] = {512, 1024, 2048};
// Step 3's cap (share of the budget); step 4's rounds share the rest, two when they agree.
constexpr double kWarmupCapShare = 0.5;
constexpr double kRoundShare = 0.375;
constexpr SettleRule kWarmupRule = {0.05, 3, 1 << 20, 0};  // the time cap is set per call
constexpr SettleRule kRoundRule = {0.05, 2, 4, 0};

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
  // One timed run's GFLOP/s on wall time.
  double timed_run() {
    Stopwatch sw;
    run();
    return flops() / sw.elapsed() * 1e-9;
  }
  double flops() const { return 2.0 * n_ * n_ * double(n_); }
  int n() const { return n_; }

 private:
  PeakPrecision p_;
  int n_;
  std::vector<float> a_, b_, c_;
  std::vector<bf16> a16_, b16_;
};

// The sizes' GEMMs, each made (and its buffers first touched, its primitive created) on
// first use and kept for the later rounds.
class SizedGemms {
 public:
  explicit SizedGemms(PeakPrecision p) : p_(p) {}
  SquareGemm& operator[](size_t i) {
    if (!made_[i]) {
      made_[i] = std::make_unique<SquareGemm>(p_, kSizes[i]);
      made_[i]->run();
    }
    return *made_[i];
  }

 private:
  PeakPrecision p_;
  std::unique_ptr<SquareGemm> made_[std::size(kSizes)];
};

// Step 4, one round: the best rate of repeated runs of each size, and the size it came from.
GemmPeak timed_round(SizedGemms& gemms, double seconds, double rate_hint) {
  GemmPeak peak;
  const double per_size = seconds / std::size(kSizes);
  for (size_t i = 0; i < std::size(kSizes); ++i) {
    const double flops = 2.0 * kSizes[i] * kSizes[i] * double(kSizes[i]);
    const double rate = std::max(rate_hint, peak.gflops);
    // A size whose first-use run plus one timed run would not fit its slot is left out;
    // the smallest never is (a short budget still yields a figure).
    if (i > 0 && rate > 0 && 2 * flops / (rate * 1e9) > per_size) continue;
    SquareGemm& g = gemms[i];
    Stopwatch slot;
    do {
      const double gflops = g.timed_run();
      if (gflops > peak.gflops) peak.gflops = gflops, peak.n = g.n();
    } while (slot.elapsed() < per_size);
  }
  return peak;
}

}  // namespace

GemmPeak measure_gemm_peak(PeakPrecision precision, int threads, double seconds_budget) {
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(threads < 1 ? 1 : threads);
  SizedGemms gemms(precision);
  // Step 3: warm up on the smallest size until two runs agree.
  SettleRule warm = kWarmupRule;
  warm.max_seconds = kWarmupCapShare * seconds_budget;
  const double hint = measure_until_settled([&] { return gemms[0].timed_run(); }, warm).best;
  // Step 4: rounds until two consecutive rounds' best rates agree; the best of all rounds.
  GemmPeak peak;
  const Settled rounds = measure_until_settled(
      [&] {
        const GemmPeak r =
            timed_round(gemms, kRoundShare * seconds_budget, std::max(hint, peak.gflops));
        if (r.gflops > peak.gflops) peak.gflops = r.gflops, peak.n = r.n;
        return r.gflops;
      },
      kRoundRule);
  peak.rounds = rounds.calls;
  peak.settled = rounds.settled;
  peak.kernel = precision == PeakPrecision::fp32 ? "oneDNN sgemm" : matmul_bf16_isa();
  omp_set_num_threads(saved_threads);
  return peak;
}

std::string describe_gemm_peak(PeakPrecision precision, const GemmPeak& peak, int threads) {
  char line[384];
  char rounds[96];
  std::snprintf(rounds, sizeof rounds,
                peak.settled ? "%d rounds, the last two within 5%%"
                             : "%d rounds that never agreed within 5%%: a disturbed machine",
                peak.rounds);
  std::snprintf(line, sizeof line,
                "%s GEMM peak %.1f GFLOP/s per thread (%s, best run %d^3 of square "
                "512/1024/2048 runs in %s, after a warm-up, wall time, %d thread(s))",
                precision == PeakPrecision::fp32 ? "fp32" : "bf16", peak.gflops / threads,
                peak.kernel.c_str(), peak.n, rounds, threads);
  return line;
}

double measure_sgemm_peak_gflops(int threads, double seconds_budget) {
  return measure_gemm_peak(PeakPrecision::fp32, threads, seconds_budget).gflops;
}

double measure_bf16_gemm_peak_gflops(int threads, double seconds_budget) {
  return measure_gemm_peak(PeakPrecision::bf16, threads, seconds_budget).gflops;
}

}  // namespace mt
