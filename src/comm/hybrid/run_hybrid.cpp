// run_hybrid: K ranks as threads of each MPI process, and how a run ends.
//
// Failures (docs/contracts.md §5, §8), as run_mpi:
//   - a rank thread ends with any exception but UsageError: the process's local job wakes
//     its other threads, one line names the root cause ("meshtrain: error: rank R: ..."),
//     and MPI_Abort(1) makes mpirun stop every process.
//   - UsageError on every rank (a bad config): the processes agree at the end, rank 0
//     prints it once, exit 2. One raised alone (the others blocked waiting for it) aborts
//     with code 2 naming the rank.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/hybrid/hybrid_process.h"
#include "comm/hybrid/run_hybrid.h"
#include "comm/mpi/launch_agreement.h"
#include "comm/mpi/mpi_abort.h"
#include "comm/mpi/peer_watch.h"
#include "core/core_binding.h"
#include "core/error.h"

namespace mt {

namespace {

[[noreturn]] void die_process(int process, const std::string& what, int code) {
  mpi_abort_once(str("process ", process, ": ", what), code);
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "0") != 0 && *v;
}

}  // namespace

void run_hybrid(int* argc, char*** argv, int ranks_per_process, const WorldOptions& options,
                const RankMain& fn) {
  MT_REQUIRE(ranks_per_process >= 1 && ranks_per_process <= kMaxLocalRanks,
             "--ranks-per-process must be in 1..", kMaxLocalRanks, " (got ", ranks_per_process,
             ")");
  const int process = start_mpi(argc, argv);
  // A process that dies is named by the others, with the ranks it ran
  // (comm/mpi/peer_watch.h).
  auto watch = std::make_unique<PeerWatch>(ranks_per_process);

  WorldOptions opts = options;
  opts.check_collectives |= env_flag("MESHTRAIN_CHECK_COLLECTIVES");
  std::unique_ptr<hybrid::HybridProcess> proc;
  try {
    proc = std::make_unique<hybrid::HybridProcess>(ranks_per_process, opts);
  } catch (const std::exception& e) {
    die_process(process, e.what(), 1);
  }

  const int k = ranks_per_process, first = proc->first_rank();
  std::vector<int> status(static_cast<size_t>(k), 0);
  std::vector<std::string> usage(static_cast<size_t>(k));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(k));
  for (int s = 0; s < k; ++s) {
    threads.emplace_back([&, s] {
      const int r = first + s;
      name_calling_thread(str("mt rank ", r));  // as the local backend's ranks
      try {
        hybrid::HybridWorld world(*proc, r);
        fn(world);
      } catch (const UsageError& e) {
        // Maybe every rank raises it (agreed on below); wake this process's other ranks
        // in case they wait for this one.
        status[static_cast<size_t>(s)] = 2;
        usage[static_cast<size_t>(s)] = e.what();
        proc->job().fail(r, std::current_exception(), local::LocalJob::FailKind::rank_exit);
      } catch (...) {
        proc->job().fail(r, std::current_exception(), local::LocalJob::FailKind::rank_exit);
        proc->exited(r);
        proc->die(r);
      }
      proc->exited(r);
    });
  }
  for (auto& t : threads) t.join();

  int mine = *std::max_element(status.begin(), status.end());
  std::string line, plain;  // the first usage error, with and without its rank
  for (int s = 0; s < k; ++s)
    if (status[static_cast<size_t>(s)] == 2 && line.empty()) {
      plain = usage[static_cast<size_t>(s)];
      line = str("rank ", first + s, ": ", plain);
    }
  const double wait_s = mine == 2 ? std::min(10.0, opts.timeout_s / 2) : opts.timeout_s;
  int worst = 0, best = 0;
  if (!proc->mpi().agree_on_exit(mine, wait_s, &worst, &best)) {
    if (mine == 2) die_process(process, line, 2);
    die_process(
        process,
        str("finished, but not every process reached the end within ", opts.timeout_s, " s"), 1);
  }
  watch.reset();  // every process reached the end
  if (mine == 2 && best == 2 && process == 0)
    std::fprintf(stderr, "meshtrain: error: %s\n", plain.c_str());
  else if (mine == 2 && best < 2)
    std::fprintf(stderr, "meshtrain: error: %s\n", line.c_str());
  // No process may exit 2 (and make mpirun end the job) before the line is out.
  if (worst == 2) {
    std::fflush(stderr);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  proc.reset();
  MPI_Finalize();
  if (worst == 2) std::exit(2);
}

}  // namespace mt
