// One process of a hybrid world (--backend mpi --ranks-per-process K): K ranks as threads
// of this process (the local backend between them) and the processes joined by MPI.
// Process p runs world ranks p*K .. p*K+K-1 (comm/hybrid/placement.h).
//
// make_group hands each rank the cheapest communicator its group allows:
//   all members in this process          -> local backend, never touches MPI
//   one member in each of several processes -> plain MPI communicator
//   L >= 2 members in each of P >= 2     -> HierarchicalCommunicator (intra + inter)
// A group with different numbers of members in different processes is refused
// (parallel/process_layout.h refuses such layouts before any rank starts).
//
// MPI communicators are created by split, which is collective over the processes and may
// not run on one communicator from two threads at once: the K threads of a process meet
// (a local barrier), thread 0 performs every split the call needs for all K of them, in
// slot order, and they meet again. Every process performs the same 2K splits per call.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/local/local_job.h"
#include "comm/mpi/mpi_group.h"
#include "comm/mpi/mpi_world.h"
#include "comm/world.h"

namespace mt::hybrid {

class HybridProcess {
 public:
  // MPI must be initialised with MPI_THREAD_MULTIPLE.
  HybridProcess(int ranks_per_process, const WorldOptions& opts);
  ~HybridProcess();  // frees the MPI communicators: before MPI_Finalize

  int process() const { return mpi_->rank(); }
  int processes() const { return mpi_->size(); }
  int ranks_per_process() const { return k_; }
  int world_size() const { return processes() * k_; }
  int first_rank() const { return process() * k_; }
  const WorldOptions& options() const { return opts_; }
  local::LocalJob& job() { return *job_; }
  MpiWorld& mpi() { return *mpi_; }

  // Collective over every rank of the world, as CommWorld::make_group. call: how many
  // make_group calls this rank made before; rendezvous: the rank's communicator over this
  // process's ranks (for the meetings around the splits).
  std::shared_ptr<Communicator> make_group(int world_rank, uint64_t call,
                                           const std::vector<int>& members, const std::string& kind,
                                           Communicator& rendezvous);

  // A rank thread ended with an exception already recorded in job(): prints the root
  // cause once ("meshtrain: error: rank R: ...") and aborts the MPI job (exit 1, or 2 for a
  // UsageError). Waits a little for the root cause's own thread, whose final exception
  // replaces a provisional one.
  [[noreturn]] void die(int world_rank);
  // Marks a rank thread finished (for die's wait).
  void exited(int world_rank) { exited_[world_rank - first_rank()].store(true); }

 private:
  struct Request {
    std::vector<int> members;
    std::string kind;
  };
  struct Split {
    std::shared_ptr<MpiGroup> coll, p2p;
  };
  void split_all();  // thread 0 of this process, between the two meetings

  int k_;
  WorldOptions opts_;
  std::unique_ptr<MpiWorld> mpi_;
  std::unique_ptr<local::LocalJob> job_;
  std::vector<Request> requests_;  // [slot], written by its own thread
  std::vector<Split> splits_;      // [slot], written by thread 0
  std::unique_ptr<std::atomic<bool>[]> exited_;
  std::mutex die_mu_;
};

// Per-rank CommWorld of a hybrid world.
class HybridWorld final : public CommWorld {
 public:
  HybridWorld(HybridProcess& process, int world_rank);

  int rank() const override { return rank_; }
  int size() const override { return process_.world_size(); }
  const char* backend_name() const override { return "hybrid"; }
  std::shared_ptr<Communicator> world() override { return world_; }
  std::shared_ptr<Communicator> make_group(const std::vector<int>& members,
                                           const std::string& kind) override;
  [[noreturn]] void abort(const std::string& why) override;
  const WorldOptions& options() const override { return process_.options(); }

  int ranks_per_process() const { return process_.ranks_per_process(); }

 private:
  HybridProcess& process_;
  int rank_;
  uint64_t calls_ = 0;
  std::shared_ptr<Communicator> rendezvous_;
  std::shared_ptr<Communicator> world_;
};

}  // namespace mt::hybrid
