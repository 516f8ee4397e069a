// Achievable single-precision GEMM throughput of this machine through the same GEMM path
// the model uses (mt::sgemm). The trainer divides model FLOP/s by it for MFU (unless
// --peak-gflops gives the figure), and the kernel benchmark reports every kernel against it.
#pragma once

namespace mt {

// Times square GEMMs of M = N = K = 512, 1024 and 2048, each size repeatedly for a third of
// seconds_budget, on `threads` OpenMP threads, and returns the best GFLOP/s of any one run
// (the least disturbed by other load). A size whose one warm-up plus one timed run would
// not fit its third (at the rate seen so far) is skipped, so a short budget (the trainer's
// 0.3 s) is many short runs and stays short. Does not change the calling thread's OpenMP
// setting on return.
double measure_sgemm_peak_gflops(int threads, double seconds_budget);

// The same for the bf16 GEMM the linear layers use under --precision bf16
// (matmul_bf16_forward: bf16 inputs, fp32 accumulation and output), the MFU denominator of
// a bf16 run. Needs bf16_matmul_supported().
double measure_bf16_gemm_peak_gflops(int threads, double seconds_budget);

}  // namespace mt
