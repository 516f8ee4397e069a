#include "core/launcher.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

namespace mt {

namespace {

// A non-negative integer, or -1 when unset or malformed.
int parse_int(const char* v) {
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
};

}  // namespace

int slurm_tasks_on_node(const std::string& tasks_per_node, int node) {
  // "2(x3),1": nodes 0-2 run 2 tasks, node 3 runs 1.
  if (node < 0) return -1;
  size_t i = 0;
  int first = 0;
  while (i < tasks_per_node.size()) {
    size_t end = tasks_per_node.find(',', i);
    if (end == std::string::npos) end = tasks_per_node.size();
    const std::string item = tasks_per_node.substr(i, end - i);
    const size_t paren = item.find("(x");
    const int tasks = parse_int(item.substr(0, paren).c_str());
    int repeat = 1;
    if (paren != std::string::npos) {
      if (item.back() != ')') return -1;
      repeat = parse_int(item.substr(paren + 2, item.size() - paren - 3).c_str());
    }
    if (tasks < 0 || repeat < 1) return -1;
    if (node < first + repeat) return tasks;
    first += repeat;
    i = end + 1;
  }
  return -1;
}

LauncherInfo launcher_from(const std::function<const char*(const char*)>& env) {
  LauncherInfo info;
  auto env_int = [&](const char* name) { return parse_int(env(name)); };
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
  // Slurm: only a job step started by srun (SLURM_STEP_ID) launched this process as one of
  // several. A batch script itself also sees SLURM_PROCID 0 and SLURM_NTASKS of the whole
  // allocation, but it is one process, which may well run --backend local.
  const int rank = env_int("SLURM_PROCID");
  if (rank >= 0 && env_int("SLURM_STEP_ID") >= 0) {
    info.name = "Slurm";
    info.rank = rank;
    int size = env_int("SLURM_STEP_NUM_TASKS");
    if (size < 0) size = env_int("SLURM_NTASKS");
    info.size = size > rank ? size : rank + 1;
    info.local_rank = env_int("SLURM_LOCALID");
    const char* per_node = env("SLURM_STEP_TASKS_PER_NODE");
    if (!per_node) per_node = env("SLURM_TASKS_PER_NODE");
    info.local_size = per_node ? slurm_tasks_on_node(per_node, env_int("SLURM_NODEID")) : -1;
  }
  return info;
}

LauncherInfo launcher_from_env() {
  return launcher_from([](const char* name) { return std::getenv(name); });
}

}  // namespace mt
