// Achievable single-precision GEMM throughput of this machine through the same GEMM path
// the model uses (mt::sgemm). The trainer divides model FLOP/s by it for MFU, and the
// kernel benchmark reports every kernel against it.
#pragma once

namespace mt {

// Runs square-ish GEMMs (large enough to reach steady state, M = N = K = 1024 and 2048)
// on `threads` OpenMP threads for about seconds_budget in total and returns the best
// GFLOP/s seen. Does not change the calling thread's OpenMP setting on return.
double measure_sgemm_peak_gflops(int threads, double seconds_budget);

}  // namespace mt
