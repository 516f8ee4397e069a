// Communicator of a group that spans several processes of a hybrid world with more than one
// member in each (comm/hybrid/hybrid_process.h). Two levels, so that the slow link between
// processes carries as little as possible and the K threads of a process share it:
//
//   P processes x L members each; group rank g = p*L + j (process p, local index j).
//   intra:  the L members inside this process (local backend: shared memory, no MPI)
//   inter:  the members with local index j, one per process (MPI; one communicator per j,
//           so the L threads of a process drive L MPI operations at once)
//
//   all_reduce      intra reduce-scatter -> inter all-reduce of the 1/L share -> intra
//                   all-gather (a count not divisible by L goes through a padded copy)
//   reduce_scatter  chunks regrouped by local index j, intra reduce-scatter of P chunks,
//                   inter reduce-scatter of one chunk
//   all_gather      inter all-gather of the slot's chunks, intra all-gather, regrouped
//   all_to_all_v    not in levels: every member exchanges with every other directly, point
//                   to point (direct_all_to_all.h), so its rows leave at its own issue
//   broadcast       inter broadcast among the root's slot, intra broadcast from it
//   barrier         intra, inter (slot 0), intra
//   send/recv       inside the process: intra; across: MPI on the receiver slot's own
//                   point-to-point communicator, the sender's slot folded into the tag
//                   (slot_tag.h; one tag is the all-to-all's)
//
// Collectives run in issue order on a worker thread of this communicator (each is several
// dependent steps); the caller gets a Work at once. The worker waits for each step between
// processes polling with short sleeps (sleeping_wait.h), not spinning: it shares the cores
// with ranks that compute meanwhile. Point-to-point calls are issued
// directly and do not wait for earlier collectives (a pipeline posts receives early).
// avg is a sum with one division at the end, as on the other backends.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/hybrid/worker_spans.h"

namespace mt::hybrid {

struct HierarchicalParts {
  std::vector<int> members;             // world ranks, ascending (process-major)
  std::string name;                     // e.g. "dp[0..3]"
  int processes = 0;                    // P
  int per_process = 0;                  // L
  int process_index = 0;                // p: this rank's process among the group's
  int local_index = 0;                  // j: this rank among its process's members
  double timeout_s = 300;               // the world's --timeout, for the waits between processes
  std::shared_ptr<Communicator> intra;  // L members of this process, index j
  std::shared_ptr<Communicator> inter;  // slot j of every process, index p
  // p2p[k]: point-to-point communicator of slot k (its members receive on it), index p.
  std::vector<std::shared_ptr<Communicator>> p2p;
};

class HierarchicalCommunicator final : public Communicator {
 public:
  explicit HierarchicalCommunicator(HierarchicalParts parts);
  ~HierarchicalCommunicator() override;

  int rank() const override;
  int size() const override;
  int global_rank(int i) const override;
  const std::string& name() const override;

  Work all_reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) override;
  Work reduce_scatter(const void* send, void* recv, size_t recv_count, DType t,
                      ReduceOp op) override;
  Work all_gather(const void* send, void* recv, size_t send_count, DType t) override;
  Work broadcast(void* buf, size_t count, DType t, int root) override;
  Work all_to_all_v(const void* send, const size_t* send_counts, void* recv,
                    const size_t* recv_counts, DType t) override;
  Work send(const void* buf, size_t count, DType t, int peer, int tag) override;
  Work recv(void* buf, size_t count, DType t, int peer, int tag) override;
  Work barrier() override;

  CommStats stats() const override;
  void reset_stats() override;

  // What the worker did, for a trace (the trainer's --trace; docs/moe.md "Overlapped
  // all-to-all"): with recording on, each collective's span from the worker picking it up
  // to its end, the time it sat queued behind earlier ones, and an all-to-all-v's step
  // between processes, on the steady clock (core/timer.h). The worker appends, the rank
  // takes them (under a lock: they are two threads).
  void set_recording(bool on);
  std::vector<WorkerSpan> take_spans();

  struct State;  // shared with the worker thread

 private:
  std::shared_ptr<State> state_;
};

}  // namespace mt::hybrid
