// The one measurement of "the GEMM peak", the denominator of mfu everywhere it is printed
// (the trainer's mfu metric, `meshtrain bench step`'s breakdown, tests/bench_moe_layer,
// bench_step) and of every "% of peak" next to a kernel. docs/performance.md, "Which peak
// mfu uses", is its user-facing statement.
//
// Method, identical for both precisions (only the GEMM routine differs):
//  1. the routine the model's linear layers run: mt::sgemm (fp32), matmul_bf16_forward
//     (bf16 operands, fp32 accumulation and output: AMX tiles or AVX512-BF16 dot products,
//     whichever matmul_bf16_isa() names);
//  2. square products M = N = K = 512, 1024, 2048, on `threads` OpenMP threads;
//  3. first a warm-up of untimed 512^3 runs until two consecutive runs agree within 5% (at
//     least three runs, at most half the budget): the first AMX tile instructions after an
//     idle spell, the core's frequency ramp and the first touch of the buffers all run
//     slower than the steady state (51, 510, 670, 700 GFLOP/s in a fresh process), and a
//     fixed slot could end inside that ramp;
//  4. then rounds: each times each size repeatedly for an eighth of the budget (skipping a
//     larger size whose single run would not fit its slot at the rate seen so far), until two
//     consecutive rounds' best rates agree within 5% (two rounds, at most four). One short
//     window can fall wholly inside a neighbour's burst: a fresh bench_moe_layer read 103
//     GFLOP/s fp32 while bench step read 154-167 in the same minutes (stop 37), and a cold
//     process is not the cause (on this machine a fresh process's second 512^3 run is at
//     full rate, and fresh and repeated calls read the same spread). A second window that
//     disagrees buys a third (kernels/peak_settling.h);
//  5. the result is the best GFLOP/s of any one run, on wall time (a neighbour only ever
//     slows a run down, so the fastest run is the least disturbed one), with the number of
//     rounds and whether they agreed.
// Time: about the budget when the machine is steady, at most twice it.
#pragma once

#include <string>

namespace mt {

enum class PeakPrecision { fp32, bf16 };

// The budget every mfu denominator is measured with (the trainer's start-up measurement,
// the benchmarks' non-quick runs), so that their peaks are one figure up to noise.
constexpr double kPeakSeconds = 0.3;

struct GemmPeak {
  double gflops = 0;     // best GFLOP/s of one run, per the whole team of `threads`
  int n = 0;             // the square size that run had
  std::string kernel;    // the routine timed ("oneDNN sgemm", or matmul_bf16_isa())
  int rounds = 0;        // step 4's rounds
  bool settled = false;  // the last two rounds agreed within 5% (false: a disturbed machine)
};

// Needs bf16_matmul_supported() for PeakPrecision::bf16. Does not change the calling
// thread's OpenMP setting on return.
GemmPeak measure_gemm_peak(PeakPrecision precision, int threads, double seconds_budget);

// "bf16 GEMM peak 842.1 GFLOP/s per thread (brg:avx512_core_amx_bf16, best run 512^3 of
// square 512/1024/2048 runs in 2 rounds, the last two within 5%, after a warm-up, wall
// time, 1 thread(s))": how a consumer names its figure.
std::string describe_gemm_peak(PeakPrecision precision, const GemmPeak& peak, int threads);

// measure_gemm_peak(...).gflops, for the callers that need only the figure.
double measure_sgemm_peak_gflops(int threads, double seconds_budget);
double measure_bf16_gemm_peak_gflops(int threads, double seconds_budget);

}  // namespace mt
