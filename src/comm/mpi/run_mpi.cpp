// run_mpi: one MPI process = one rank, and how a run ends.
//
// Failures (docs/contracts.md §5, §8):
//   - any exception but UsageError: print "meshtrain: error: rank R: <what>" and
//     MPI_Abort(MPI_COMM_WORLD, 1); mpirun then stops every rank, so none is left hanging.
//   - UsageError (exit 2): usually raised identically on every rank (a bad config). The
//     ranks agree on the outcome at the end of the run: if every rank raised it, rank 0
//     prints it once, all finalise and exit(2). A rank that raised it alone prints its own
//     line; if the others do not reach the end soon (they may be blocked in a collective
//     that waits for it), it aborts the job with code 2, before their timeouts fire.
//   - a usage error found before the ranks started (the options, the files): agreed on by
//     start_mpi before anything else (comm/mpi/launch_agreement.h).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "comm/mpi/launch_agreement.h"
#include "comm/mpi/mpi_abort.h"
#include "comm/mpi/mpi_world.h"
#include "comm/mpi/peer_watch.h"
#include "comm/world.h"
#include "core/error.h"

namespace mt {

namespace {

[[noreturn]] void die(int rank, const std::string& what, int code) {
  mpi_abort_once(str("rank ", rank, ": ", what), code);
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "0") != 0 && *v;
}

}  // namespace

void run_mpi(int* argc, char*** argv, const WorldOptions& options, const RankMain& fn) {
  const int rank = start_mpi(argc, argv);
  // A process that dies is named by the others (comm/mpi/peer_watch.h).
  auto watch = std::make_unique<PeerWatch>(1);

  WorldOptions opts = options;
  opts.check_collectives |= env_flag("MESHTRAIN_CHECK_COLLECTIVES");

  int status = 0;
  std::string usage;
  std::unique_ptr<MpiWorld> world;
  try {
    world = std::make_unique<MpiWorld>(opts);
    fn(*world);
  } catch (const UsageError& e) {
    status = 2;
    usage = e.what();
  } catch (const std::bad_alloc&) {
    die(rank, "out of memory (std::bad_alloc)", 1);
  } catch (const std::exception& e) {
    die(rank, e.what(), 1);
  } catch (...) {
    die(rank, "unknown exception", 1);
  }
  if (!world) die(rank, usage, 2);

  // A usage error waits only briefly for the others (see the top of the file). A rank that
  // finished waits twice the collective timeout: a rank stuck in a collective then reports
  // first, naming the op and the missing ranks, instead of this generic line racing it.
  const double wait_s = status == 2 ? std::min(10.0, opts.timeout_s / 2) : 2 * opts.timeout_s;
  int worst = 0, best = 0;
  if (!world->agree_on_exit(status, wait_s, &worst, &best)) {
    if (status == 2) die(rank, usage, 2);
    die(rank, str("finished, but not every rank reached the end within ", wait_s, " s"), 1);
  }
  watch.reset();  // every rank reached the end
  if (status == 2 && best == 2 && rank == 0)
    std::fprintf(stderr, "meshtrain: error: %s\n", usage.c_str());
  else if (status == 2 && best < 2)
    std::fprintf(stderr, "meshtrain: error: rank %d: %s\n", rank, usage.c_str());
  // No process may exit 2 (and make mpirun end the job) before the line is out.
  if (worst == 2) {
    std::fflush(stderr);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  world.reset();
  MPI_Finalize();
  if (worst == 2) std::exit(2);
}

}  // namespace mt
