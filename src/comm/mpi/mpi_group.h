// State shared by an MpiCommunicator and the Work handles it hands out: a Work can outlive
// the call that made it, and its wait() needs the group's name, timeout and counters.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/world.h"

namespace mt {

class BackgroundProgress;
class MpiWork;

struct MpiGroup {
  MPI_Comm comm = MPI_COMM_NULL;        // the group's traffic
  MPI_Comm check_comm = MPI_COMM_NULL;  // MESHTRAIN_CHECK_COLLECTIVES traffic, kept apart
  std::string name;                     // e.g. "dp[1,3]"
  std::vector<int> members;             // global ranks, ascending
  int rank = 0;                         // index in the group
  int world_rank = 0;
  int tag_ub = 0;  // largest tag MPI accepts
  WorldOptions opts;

  // Sequence numbers count the calls issued before this one (the first is #0), as in the
  // local backend.
  std::atomic<uint64_t> collective_seq{0};
  std::atomic<uint64_t> p2p_seq{0};
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> wait_ns{0};

  // The most recent collective: the next one waits for it first, so collectives on this
  // group complete in issue order even where MPI could finish a later one sooner. Weak,
  // since a Work holds its group; an expired one is complete (~MpiWork waits).
  std::mutex order_mutex;
  std::weak_ptr<MpiWork> last_collective;

  // Polls this group's nonblocking collectives while the rank computes
  // (comm/mpi/background_progress.h); owned by the MpiWorld. Null: only the rank's own
  // test() and wait() progress them (the hybrid world's views, whose worker polls).
  BackgroundProgress* progress = nullptr;

  int size() const { return static_cast<int>(members.size()); }
};

}  // namespace mt
