#include "comm/mpi/launch_agreement.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "comm/mpi/mpi_abort.h"
#include "core/error.h"

namespace mt {

namespace {

int init_threaded(int* argc, char** argv[]) {
  // Open MPI's nonblocking all-reduce (libnbc) picks a binomial reduce + broadcast for fewer
  // than 4 ranks or in place: 1.25-1.8x slower than MPI_Allreduce at 1-64 MiB here.
  // Reduce-scatter + all-gather (3; ring where it does not apply) matches it. Read at
  // MPI_Init, and an explicit setting by the user wins.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw RuntimeError("MPI_Init_thread failed");
  return provided;
}

// The agreement itself: which process is the lowest that failed, and did all of them fail.
// A rank of size() means none failed.
struct LaunchOutcome {
  int first_failed = 0;
  bool all_failed = false;
};

LaunchOutcome agree(bool failed) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // One MAX reduction answers both: size - rank is largest for the lowest failing rank.
  int mine[2] = {failed ? size - rank : 0, failed ? 0 : 1};
  int all[2] = {0, 0};
  MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return {size - all[0], all[1] == 0};
}

// Some process failed: the lowest one prints, and only then may any process exit.
[[noreturn]] void end_together(const LaunchOutcome& o, const std::string& line) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == o.first_failed) {
    if (o.all_failed)
      std::fprintf(stderr, "meshtrain: error: %s\n", line.c_str());
    else
      std::fprintf(stderr, "meshtrain: error: MPI process %d: %s\n", rank, line.c_str());
    std::fflush(stderr);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  std::exit(2);
}

}  // namespace

int start_mpi(int* argc, char** argv[]) {
  const int provided = init_threaded(argc, argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const LaunchOutcome o = agree(false);
  if (o.first_failed < size) end_together(o, "");
  // Without MPI_THREAD_MULTIPLE, two communicators used from two threads could corrupt MPI.
  if (provided < MPI_THREAD_MULTIPLE)
    mpi_abort_once(str("rank ", rank, ": this MPI provides thread level ", provided,
                       "; meshtrain needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")"),
                   1);
  return rank;
}

void end_launch_with_usage_error(int* argc, char** argv[], const std::string& line,
                                 int launcher_size) {
  init_threaded(argc, argv);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // MPI made a world of its own (a singleton): the other processes cannot be met here.
  if (size != launcher_size) {
    MPI_Finalize();
    return;
  }
  end_together(agree(true), line);
}

}  // namespace mt
