#include "cli/bench_gemm.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "kernels/gemm_peak.h"
#include "kernels/matmul_bf16.h"

namespace mt {

namespace {

// The largest budget one reading may take: a mistyped --seconds 3600 is refused, not run.
constexpr double kMaxReadingSeconds = 600;

struct Spread {
  double min = 0, median = 0, max = 0;
};

Spread spread_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {v.front(), median, v.back()};
}

}  // namespace

CLI::App* add_gemm_bench(CLI::App* bench, FlagSet& flags, GemmBenchOptions& o) {
  CLI::App* gemm = bench->add_subcommand(
      "gemm",
      "measured GEMM peak (the mfu denominator), read --repeat times: each reading, "
      "then min/median/max");
  gemm->add_option("--threads", o.threads, "threads")->capture_default_str();
  flags.add_choice("gemm", "precision", &o.precision,
                   "the routine timed: fp32 = oneDNN sgemm, bf16 = matmul_bf16_forward (AMX "
                   "tiles or AVX512-BF16), as the model's linears under --precision run",
                   precision_names(), ChoiceRefusal::in_words);
  flags.add("gemm", "repeat", &o.repeat,
            "readings in a row; each is printed, then their min, median and max",
            FlagRange{1, 1000});
  flags.add("gemm", "seconds", &o.seconds,
            "budget of each reading (about this long on a steady machine, at most twice it)",
            FlagRange{0, kMaxReadingSeconds, true});
  flags.register_cli(*gemm);
  return gemm;
}

int run_gemm_bench(FlagSet& flags, const GemmBenchOptions& o, std::ostream& out) {
  // Phase 1: everything refused before anything is measured.
  flags.check_values();
  require_thread_count("--threads", o.threads);
  const bool bf16 = o.precision == Precision::bf16;
  MT_REQUIRE(!bf16 || bf16_matmul_supported(),
             "--precision bf16 needs a CPU on which oneDNN runs bf16 matmuls (AVX512 or newer); "
             "this one has none: use --precision fp32");
  const PeakPrecision p = bf16 ? PeakPrecision::bf16 : PeakPrecision::fp32;
  const char* name = precision_name(o.precision);
  // Phase 2: the readings, each printed as soon as it is taken (a long study shows progress).
  std::vector<double> per_thread;
  for (int i = 1; i <= o.repeat; ++i) {
    const GemmPeak peak = measure_gemm_peak(p, o.threads, o.seconds);
    per_thread.push_back(peak.gflops / o.threads);
    out << "reading " << i << " of " << o.repeat << ": " << describe_gemm_peak(p, peak, o.threads)
        << "\n"
        << std::flush;
  }
  // Phase 3: the spread, then the whole team's best reading (the line scripts read).
  const Spread s = spread_of(per_thread);
  char line[320];
  std::snprintf(line, sizeof line,
                "%s GEMM peak per thread over %d reading(s) of %g s: min %.1f, median %.1f, max "
                "%.1f GFLOP/s (max/min %.2f)\n%s GEMM peak: %.1f GFLOP/s with %d thread(s), the "
                "best reading\n",
                name, o.repeat, o.seconds, s.min, s.median, s.max, s.min > 0 ? s.max / s.min : 0.0,
                name, s.max * o.threads, o.threads);
  out << line;
  return 0;
}

}  // namespace mt
