// Entry point of the hybrid world (--backend mpi --ranks-per-process K), beside run_local
// and run_mpi (comm/world.h); the CommWorld it hands each rank names its backend "hybrid".
#pragma once

#include "comm/world.h"

namespace mt {

// Each MPI process runs K ranks as threads, process p holding world ranks p*K .. p*K+K-1;
// groups inside a process use the local backend, groups across processes MPI,
// hierarchically where a process holds several members (comm/hybrid/hybrid_process.h).
// Initialises MPI with MPI_THREAD_MULTIPLE and finalises it. Failures end the job as
// run_mpi's do, naming the rank.
void run_hybrid(int* argc, char*** argv, int ranks_per_process, const WorldOptions& opts,
                const RankMain& fn);

}  // namespace mt
