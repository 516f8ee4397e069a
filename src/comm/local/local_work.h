// Work handles of the local backend.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <tuple>

#include "comm/communicator.h"
#include "comm/local/collective_op.h"
#include "comm/local/group_state.h"
#include "comm/local/local_communicator.h"
#include "comm/local/op_queue.h"

namespace mt::local {

// A queued collective: complete when its queue ticket has run.
class CollectiveWork final : public Work::Impl {
 public:
  CollectiveWork(std::shared_ptr<OpQueue> q, uint64_t ticket, std::shared_ptr<OpStatus> st,
                 std::shared_ptr<LocalCommunicator::Stats> stats)
      : q_(std::move(q)), ticket_(ticket), st_(std::move(st)), stats_(std::move(stats)) {}
  bool test() override;
  void wait() override;

 private:
  std::shared_ptr<OpQueue> q_;
  uint64_t ticket_;
  std::shared_ptr<OpStatus> st_;
  std::shared_ptr<LocalCommunicator::Stats> stats_;
};

// A send or receive: complete when matched and copied, and once every collective issued
// before it on the same communicator has completed (calls complete in issue order).
class P2PWork final : public Work::Impl {
 public:
  using Key = std::tuple<int, int, int>;  // mailbox channel (src, dst, tag)
  P2PWork(std::shared_ptr<GroupState> g, std::shared_ptr<P2POp> op, Key key, bool is_send,
          int global_rank, std::shared_ptr<OpQueue> q, uint64_t prior_ticket,
          std::shared_ptr<LocalCommunicator::Stats> stats, uint64_t seq)
      : g_(std::move(g)),
        op_(std::move(op)),
        key_(key),
        is_send_(is_send),
        global_rank_(global_rank),
        q_(std::move(q)),
        prior_(prior_ticket),
        stats_(std::move(stats)),
        seq_(seq) {}
  // A request abandoned before it completed (its owner unwinding from an error) is
  // withdrawn, so a late peer can never write into or read from a freed buffer.
  ~P2PWork() override;
  bool test() override;
  void wait() override;

 private:
  // Takes the request out of the mailbox, or, if a peer already matched it, waits for the
  // copy in flight to finish. After it returns the buffer is no longer touched.
  void withdraw();
  void fail(const std::string& why);  // withdraws the request, records, throws
  // The request and what its peer failed to do, described only when it fails: formatting
  // them at every issue cost each hop of a ring or pipeline about a microsecond of CPU.
  std::string where() const;    // "rank 3: recv #2 from rank 1 (tag 0x1000005) on group pp[1,5]"
  std::string missing() const;  // "rank 1 did not send"
  int peer_global() const;

  std::shared_ptr<GroupState> g_;
  std::shared_ptr<P2POp> op_;
  Key key_;
  bool is_send_;
  int global_rank_;
  std::shared_ptr<OpQueue> q_;
  uint64_t prior_;
  std::shared_ptr<LocalCommunicator::Stats> stats_;
  uint64_t seq_;            // this communicator's p2p request number
  bool withdrawn_ = false;  // withdraw() ran: the mailbox no longer holds the request
};

}  // namespace mt::local
