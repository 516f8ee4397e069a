#include "core/omp_wait.h"

#include <unistd.h>

#include <cstdlib>

namespace mt {

std::optional<EnvAssignment> omp_wait_assignment(
    const std::function<const char*(const char*)>& getenv) {
  for (const char* chosen : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
    const char* v = getenv(chosen);
    if (v && *v) return std::nullopt;
  }
  return EnvAssignment{"GOMP_SPINCOUNT", kDefaultGompSpinCount};
}

void reexec_with_omp_wait_default(char** argv) {
  const std::optional<EnvAssignment> a = omp_wait_assignment(std::getenv);
  if (!a) return;
  // The fresh image finds the variable set and returns above, so this runs at most once.
  if (setenv(a->name.c_str(), a->value.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Still here: no /proc, or the binary was replaced on disk. Leave the environment as it
  // was, so that child processes are not told something this process did not do.
  unsetenv(a->name.c_str());
}

}  // namespace mt
