// What a parallel launcher (mpirun, srun, hydra) tells a process through its environment,
// read before MPI is initialised so that checks that must run before any rank starts can
// use it: which process of how many this is, and how many share this host.
#pragma once

#include <functional>
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
// (MV2_COMM_WORLD_*), Slurm (an srun step: SLURM_STEP_ID set; SLURM_PROCID, SLURM_LOCALID,
// SLURM_STEP_NUM_TASKS, SLURM_STEP_TASKS_PER_NODE with SLURM_NODEID). Malformed values are
// ignored. A Slurm batch script outside srun is not a launch of several processes.
LauncherInfo launcher_from_env();
// The same, reading variables through env (unit tests).
LauncherInfo launcher_from(const std::function<const char*(const char*)>& env);
// Tasks on node `node` from Slurm's compressed list ("2(x3),1" -> 2 on nodes 0-2, 1 on 3);
// -1 when malformed or beyond the list.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

}  // namespace mt
