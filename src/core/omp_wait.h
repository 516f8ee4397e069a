// How long an idle OpenMP thread spins before it sleeps. libgomp's default (about 3 ms of
// spinning at every barrier and region end) costs little on cores of one's own, but when the
// cores are shared a spinning thread takes the core from the thread it waits for: a 2-thread
// step on 2 busy cores ran ~5x slower (docs/performance.md). libgomp reads OMP_WAIT_POLICY
// and GOMP_SPINCOUNT once, in its load-time constructor, which runs before main() and before
// any constructor of this binary, and has no call that changes them later; so main() puts
// a bounded spin count into the environment and re-executes the binary, unless the user
// chose a policy of their own.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace mt {

struct EnvAssignment {
  std::string name, value;
};

// Spins before an idle OpenMP thread sleeps (libgomp's default is 300000, ~3 ms).
constexpr const char* kDefaultGompSpinCount = "1000";

// The variable to add before OpenMP starts, or nothing when the user chose: OMP_WAIT_POLICY
// or GOMP_SPINCOUNT set to a non-empty value (libgomp treats an empty one as unset).
// getenv: the environment to decide on (std::getenv in the binary).
std::optional<EnvAssignment> omp_wait_assignment(
    const std::function<const char*(const char*)>& getenv);

// Applies omp_wait_assignment to this process's environment and replaces the process with
// a fresh copy of the binary (/proc/self/exe, the same argv and environment, the same pid,
// so launchers such as mpirun keep tracking it). Returns when nothing needs setting, or when
// the re-exec is not possible (the run then goes on with libgomp's defaults). Call first
// in main(), before any thread exists.
void reexec_with_omp_wait_default(char** argv);

}  // namespace mt
