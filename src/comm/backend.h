// Which communicator backend runs the ranks (--backend): local, threads of this process;
// mpi, one MPI process per rank (or per --ranks-per-process ranks, the hybrid world).
// Parsed from the flag once; everything after switches on the enum.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mt {

enum class Backend { local, mpi };

// The names --backend takes.
inline std::vector<std::pair<std::string, Backend>> backend_names() {
  return {{"local", Backend::local}, {"mpi", Backend::mpi}};
}

inline const char* backend_name(Backend b) {
  return b == Backend::mpi ? "mpi" : "local";
}

}  // namespace mt
