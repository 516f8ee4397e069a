// Communicator over an MPI communicator (--backend mpi).
//
// Each call starts the matching nonblocking MPI operation on the caller's buffers
// (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast, MPI_Ialltoallv,
// MPI_Isend/Irecv, MPI_Ibarrier) and returns at once; nothing is staged, so the cost is
// MPI's own. In place maps to MPI_IN_PLACE:
//   all_reduce      recv == send
//   reduce_scatter  recv == send + rank()*count (NCCL's convention): MPI reduces in place
//                   and leaves the result at the start of send; it is then moved to the
//                   rank's chunk (1/size() of the buffer). The rest of send is scratch.
//   all_gather      send == recv + rank()*count
//   all_to_all_v    send == recv, with send_counts == recv_counts
// avg is a sum followed by a division on completion (floats only).
//
// Ordering: MPI matches collectives on one communicator in issue order; each collective's
// Work also waits for the previous one, so completion is observed in issue order too.
// Point-to-point calls are ordered per (peer, tag) by MPI's non-overtaking rule; they
// complete after the collectives issued before them, but collectives never wait for them
// (a pipeline posts receives early). Different communicators are
// independent MPI communicators under MPI_THREAD_MULTIPLE, so they never block each other.
//
// Counts above INT_MAX (MPI's count type) are split into several operations for
// all_reduce, broadcast, send and recv; the other collectives refuse them with an error.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/mpi/mpi_group.h"

namespace mt {

class MpiWork;

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(std::shared_ptr<MpiGroup> group);

  int rank() const override { return group_->rank; }
  int size() const override { return group_->size(); }
  int global_rank(int i) const override;
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

 private:
  // A collective's Work, numbered and chained after the previous collective.
  std::shared_ptr<MpiWork> start_collective(const std::string& what);
  Work finish_collective(std::shared_ptr<MpiWork> work, uint64_t bytes);
  std::shared_ptr<MpiWork> start_p2p(const char* op, const char* dir, int peer, int tag,
                                     size_t count, DType t);

  std::shared_ptr<MpiGroup> group_;
};

}  // namespace mt
