// What a parallel launcher (mpirun, srun, hydra) tells a process through its environment,
// read before MPI is initialised so that checks that must run before any rank starts can
// use it: which process of how many this is, and how many share this host.
#pragma once

#include <string>

namespace mt {

struct LauncherInfo {
  std::string name;     // "Open MPI", "PMIx", "PMI", "Slurm", "MVAPICH"; empty: no launcher
  int rank = 0;         // this process's index among the launched processes
  int size = 1;         // processes launched (1 without a launcher)
  int local_rank = -1;  // index among the processes on this host (-1: unknown)
  int local_size = -1;  // processes on this host (-1: unknown)
  bool launched() const { return !name.empty(); }
};

// Reads the first launcher whose variables are set, in the order Open MPI
// (OMPI_COMM_WORLD_*), PMIx (PMIX_RANK), PMI (PMI_RANK / PMI_SIZE), MVAPICH
// (MV2_COMM_WORLD_*), Slurm (SLURM_PROCID / SLURM_NTASKS). Malformed values are ignored.
LauncherInfo launcher_from_env();

}  // namespace mt
