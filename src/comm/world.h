// A rank's view of the whole job, and how groups are made from it.
//
// The same rank code runs on both backends; only the CommWorld differs:
//   local: run_local(n, ...) starts n threads of this process, one per rank;
//   mpi:   run_mpi(...) runs the calling process as one rank of MPI_COMM_WORLD.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/core_binding.h"

namespace mt {

struct WorldOptions {
  double timeout_s = 300;          // a wait longer than this fails the run (--timeout)
  bool check_collectives = false;  // MESHTRAIN_CHECK_COLLECTIVES=1: verify op/count agreement
  // run_local: which cores each rank thread (and the OpenMP team it starts) may use
  // (--bind; core/core_binding.h). none by default: callers that run several OpenMP
  // threads per rank say how many (threads_per_rank) before they ask for a binding.
  CoreBinding bind = CoreBinding::none;
  int threads_per_rank = 1;
};

class CommWorld {
 public:
  virtual ~CommWorld() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend_name() const = 0;  // "local" or "mpi"
  // Communicator over all ranks (name "world[0..n-1]").
  virtual std::shared_ptr<Communicator> world() = 0;
  // Collective over the world: every rank calls it, in the same order, passing the member
  // list (global ranks, ascending) of the group it belongs to; the lists form a partition
  // of the world. kind names the group ("dp", "tp", ...) in messages.
  virtual std::shared_ptr<Communicator> make_group(const std::vector<int>& members,
                                                   const std::string& kind) = 0;
  // This rank failed: make every other rank's pending and future waits fail promptly with a
  // message naming this rank (local), or abort the job (MPI).
  virtual void abort(const std::string& why) = 0;
  virtual const WorldOptions& options() const = 0;
};

using RankMain = std::function<void(CommWorld&)>;

// Runs fn on n ranks as threads of this process and joins them. If any rank throws, the
// others are woken with an error naming it, and run_local rethrows the first failure
// (a UsageError stays a UsageError) as seen by the failing rank.
void run_local(int n, const WorldOptions& opts, const RankMain& fn);
// Ranks one process may run as threads: beyond this a typo (--ranks 100000) would start
// threads until the process dies; larger worlds belong on the MPI backend.
constexpr int kMaxLocalRanks = 1024;

// Runs fn as this process's rank of MPI_COMM_WORLD (initialises MPI with
// MPI_THREAD_MULTIPLE, finalises it after). A failure on this rank prints one line naming
// the rank and calls MPI_Abort, so no other rank is left hanging.
void run_mpi(int* argc, char*** argv, const WorldOptions& opts, const RankMain& fn);

}  // namespace mt
