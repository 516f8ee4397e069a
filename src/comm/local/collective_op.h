// One collective of the local backend as a queued op (op_queue.h): three steps separated
// by the group's phase counters (group_state.h), each run as soon as its peers are ready,
// by whichever thread of this rank advances the queue.
//
//   unpublished --publish descriptor, arrive 1-->  published
//   published   --all at 1: verify, run this member's share, arrive 3-->  shared
//   shared      --all at 3 (no peer reads our buffers any more)-->  finished
//
// A barrier finishes once all are at 1 (descriptors are double-buffered: no closing phase).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>

#include "comm/local/group_state.h"
#include "comm/local/op_queue.h"

namespace mt::local {

class LocalCommunicator;

// Outcome of one queued collective; error is written before the op finishes.
struct OpStatus {
  std::exception_ptr error;
};

class CollectiveOp final : public QueuedOp {
 public:
  CollectiveOp(LocalCommunicator& comm, const CollDesc& d, uint64_t seq,
               std::shared_ptr<OpStatus> status)
      : comm_(comm), d_(d), seq_(seq), status_(std::move(status)) {}

  bool advance() override;
  bool ready() const override;
  void request_laggards() const override;
  void time_out(double timeout_s) override;

 private:
  enum Stage : int { unpublished, published, shared, finished };
  // The phase counter value the current stage waits for (0: waits for nothing).
  uint64_t target() const;
  bool all_at(uint64_t target) const;
  void throw_if_job_failed() const;
  void fail(std::exception_ptr error);

  LocalCommunicator& comm_;
  CollDesc d_;
  uint64_t seq_;
  std::shared_ptr<OpStatus> status_;
  std::atomic<int> stage_{unpublished};
};

}  // namespace mt::local
