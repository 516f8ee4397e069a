// Compute threads per rank. Ranks of the local backend are std::threads of one process;
// OpenMP keeps its thread-count setting per calling thread, so each rank sets its own.
#pragma once

namespace mt {

// Sets the number of OpenMP threads the calling thread (one rank) uses for its kernels.
void set_compute_threads(int n);
int compute_threads();

}  // namespace mt
