#include "core/launcher.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

namespace mt {

namespace {

// A non-negative integer environment variable, or -1 when unset or malformed.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  int out = -1;
  auto [end, ec] = std::from_chars(v, v + std::strlen(v), out);
  return ec == std::errc() && *end == '\0' && out >= 0 ? out : -1;
}

struct LauncherVars {
  const char* name;
  const char *rank, *size, *local_rank, *local_size;
};

// Launchers in the order they are trusted; a process started by Open MPI's mpirun also
// carries PMIx variables, and one started by srun inside an allocation carries Slurm's.
constexpr LauncherVars kLaunchers[] = {
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"PMIx", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE"},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"MVAPICH", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
     "MV2_COMM_WORLD_LOCAL_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

}  // namespace

LauncherInfo launcher_from_env() {
  LauncherInfo info;
  for (const LauncherVars& l : kLaunchers) {
    const int rank = env_int(l.rank);
    if (rank < 0) continue;
    info.name = l.name;
    info.rank = rank;
    const int size = env_int(l.size);
    info.size = size > rank ? size : rank + 1;
    info.local_rank = env_int(l.local_rank);
    info.local_size = env_int(l.local_size);
    return info;
  }
  return info;
}

}  // namespace mt
