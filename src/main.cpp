#include "cli/cli.h"
#include "core/omp_wait.h"

int main(int argc, char** argv) {
  mt::reexec_with_omp_wait_default(argv);  // before OpenMP's first region (core/omp_wait.h)
  return mt::cli_main(argc, argv);
}
