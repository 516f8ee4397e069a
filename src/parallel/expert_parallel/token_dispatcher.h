// Expert-parallel token exchange over the ep communicator (ParallelContext::ep): the
// TokenExchange a MoeLayer calls to send rows to the ranks owning their experts and back.
//
// Protocol for one dispatch (and its mirror image for combine and in backward):
//   1. counts: an all-to-all-v of E/ep int32 per peer — how many rows this rank sends to
//      each of the peer's local experts; each rank learns what it will receive.
//   2. payload: an all-to-all-v of the rows, already grouped by destination rank (and by
//      expert inside it) by the local permutation (kernels/token_permutation.h), into the
//      staging buffer; the received blocks (source-major) are then regrouped expert-major.
// Combine regroups back to source-major and sends the expert outputs back with the count
// arrays swapped; the counts of step 1 are kept in the microbatch's slot, so combine and
// both backward exchanges need no further count exchange.
//
// Started exchanges (start_dispatch / start_combine) issue the payload all-to-all-v and
// return; the communicator moves the rows in the background (the local backend's progress
// thread, MPI's own progress) while the layer computes. Each started exchange owns its
// element counts, which the communicator reads until it completes.
//
// With a span sink set (the trainer's --trace), every wait on the ep group, blocking or at
// a finish, becomes an "ep all-to-all wait" span: the exposed part of the exchanges. The
// rank's work between a dispatch's finish and the next combine's start (the experts of an
// overlapped part) becomes an "experts" span, and where the ep group spans processes
// (comm/hybrid), its worker's steps come on a track of their own (category "comm worker"):
// whether the rows moved while the rank computed or while it waited. Every exchange's
// start is marked ("ep counts issued", "ep dispatch issued", "ep combine issued"), so a
// reader can tell a wait for a peer that had not yet started the exchange (the ranks'
// skew) from the exchange's own time (bench/moe_overlap_trace.py --breakdown).
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/token_exchange.h"
#include "parallel/microbatch_runner.h"

namespace mt {

class TokenDispatcher final : public TokenExchange {
 public:
  explicit TokenDispatcher(std::shared_ptr<Communicator> ep);

  int rank() const override { return ep_->rank(); }
  int size() const override { return ep_->size(); }
  void exchange_counts(const int32_t* send_counts, int32_t* recv_counts, int per_rank) override;
  std::unique_ptr<PendingExchange> start_exchange_counts(const int32_t* send_counts,
                                                         int32_t* recv_counts,
                                                         int per_rank) override;
  void dispatch(float* dst, const float* src, float* staging, const ExchangeCounts& c,
                int width) override;
  void combine(float* dst, const float* src, float* staging, const ExchangeCounts& c,
               int width) override;
  std::unique_ptr<PendingExchange> start_dispatch(float* dst, const float* src, float* staging,
                                                  const ExchangeCounts& c, int width) override;
  std::unique_ptr<PendingExchange> start_combine(float* dst, const float* src, float* staging,
                                                 const ExchangeCounts& c, int width) override;

  // Where the waits go (empty: nowhere). The sink must outlive the calls.
  void set_span_sink(SpanSink sink);

 private:
  class Pending;
  // Element counts of one payload all-to-all-v: to_rank[d] floats go to rank d, from_rank[s]
  // come from rank s (row counts summed per rank from c, times width).
  struct Elems {
    std::vector<size_t> to_rank, from_rank;
  };
  // The dispatch direction's counts (c.send out, c.recv in); combine swaps them.
  Elems dispatch_elems(const ExchangeCounts& c, int width) const;
  // Issues the payload all-to-all-v with e's counts.
  Work exchange_rows(const float* send, float* recv, const Elems& e);
  // w.wait(), reported to the sink.
  void wait(Work& w) const;

  std::shared_ptr<Communicator> ep_;
  // The started exchange's issue, and the experts span since the last dispatch's finish.
  void mark_issue(const char* what, bool combine);
  // Hands what the ep communicator's worker recorded to the sink.
  void drain_worker_spans() const;

  SpanSink sink_;
  double last_dispatch_end_ = 0;  // 0: no dispatch finished since the last combine started
  // Element counts handed to the blocking calls; they must outlive the call, hence members.
  std::vector<size_t> send_elems_, recv_elems_;
};

}  // namespace mt
