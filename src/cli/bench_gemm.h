// `meshtrain bench gemm`: the GEMM peak of kernels/gemm_peak.h (the mfu denominator) read
// --repeat times in a row, each reading printed, then their min / median / max, so that a
// user can see how far one precision's peak moves on their machine between readings (stop
// 39 saw the bf16 peak anywhere in 746-1360 GFLOP/s within minutes) before trusting an mfu
// figure or passing --peak-gflops (docs/performance.md, "Which peak mfu uses").
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>

#include "cli/flag_set.h"
#include "model/precision.h"

namespace mt {

struct GemmBenchOptions {
  int threads = 1;
  Precision precision = Precision::fp32;
  int repeat = 1;        // readings, one after another in this process
  double seconds = 2.0;  // each reading's budget (measure_gemm_peak's seconds_budget)
};

// The `gemm` subcommand of `bench`, its flags registered in `flags` (numbers range-checked
// by flags.check_values(), the precision parsed into its enum once).
CLI::App* add_gemm_bench(CLI::App* bench, FlagSet& flags, GemmBenchOptions& o);

// Checks what FlagSet cannot (the thread count, a bf16 GEMM on this CPU: UsageError), then
// measures and prints. Returns the exit code.
int run_gemm_bench(FlagSet& flags, const GemmBenchOptions& o, std::ostream& out);

}  // namespace mt
