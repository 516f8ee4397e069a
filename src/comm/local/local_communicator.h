// Communicator of the local backend: one object per (rank, group), all members of a group
// sharing one GroupState. Collectives are queued on this rank's OpQueue for the group as
// CollectiveOps and run step by step directly on the peers' buffers (collective_op.h,
// local_collectives.cpp);
// point-to-point messages are matched at issue time through the group's mailbox
// (see local_p2p.cpp).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/local/group_state.h"
#include "comm/local/op_queue.h"

namespace mt::local {

struct OpStatus;
class CollectiveOp;

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<GroupState> group, int global_rank);
  ~LocalCommunicator() override;

  int rank() const override { return me_; }
  int size() const override { return static_cast<int>(group_->members.size()); }
  int global_rank(int i) const override { return group_->members.at(i); }
  const std::string& name() const override { return group_->name; }

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

  // Shared with the Work handles, which may outlive a call's frame.
  struct Stats {
    std::atomic<uint64_t> bytes_sent{0}, calls{0};
    std::atomic<double> wait_seconds{0};
  };

 private:
  friend class CollectiveOp;  // runs the steps below

  Work submit(const CollDesc& d, uint64_t bytes_sent);
  // Steps of one collective (collective_op.h): publish the descriptor and arrive at
  // phase 1; once all have, run this member's share of the data movement.
  void publish(const CollDesc& d, uint64_t seq);
  void run_share(const CollDesc& d, uint64_t seq);
  void run_all_reduce(const CollDesc& d, uint64_t seq);
  void run_reduce_scatter(const CollDesc& d, uint64_t seq);
  void run_all_gather(const CollDesc& d, uint64_t seq);
  void run_broadcast(const CollDesc& d, uint64_t seq);
  void run_all_to_all_v(const CollDesc& d, uint64_t seq);
  void verify_agreement(const CollDesc& d, uint64_t seq) const;

  // Phase synchronisation (group_state.h).
  void arrive(uint64_t seq, uint64_t phase);
  const CollDesc& peer(int member, uint64_t seq) const { return group_->desc[member][seq % 2]; }

  Work p2p(bool is_send, const void* sbuf, void* rbuf, size_t count, DType t, int peer, int tag);
  // "rank 3: all_reduce #118 on group dp[1,3]"
  std::string where(const char* op, uint64_t seq) const;

  std::shared_ptr<GroupState> group_;
  LocalJob& job_;
  int me_;                 // index in the group
  int global_rank_;        // index in the world
  uint64_t next_seq_ = 0;  // collectives issued so far (by the calling thread)
  uint64_t p2p_seq_ = 0;   // sends and receives issued so far
  std::shared_ptr<Stats> stats_;
  std::shared_ptr<OpQueue> queue_;
};

}  // namespace mt::local
