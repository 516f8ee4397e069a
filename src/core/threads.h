// Compute threads per rank. Ranks of the local backend are std::threads of one process;
// OpenMP keeps its thread-count setting per calling thread, so each rank sets its own.
#pragma once

namespace mt {

// One range for every command's --threads: at least one, and no more than a machine
// could plausibly run (a typo like 100000 would otherwise spawn threads until it crashes).
constexpr int kMaxComputeThreads = 256;
// Throws UsageError "FLAG must be in 1..256 (got N)".
void require_thread_count(const char* flag, int n);

// Sets the number of OpenMP threads the calling thread (one rank) uses for its kernels.
void set_compute_threads(int n);
int compute_threads();

}  // namespace mt
