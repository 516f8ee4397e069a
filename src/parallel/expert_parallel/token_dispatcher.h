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
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/token_exchange.h"

namespace mt {

class TokenDispatcher final : public TokenExchange {
 public:
  explicit TokenDispatcher(std::shared_ptr<Communicator> ep);

  int rank() const override { return ep_->rank(); }
  int size() const override { return ep_->size(); }
  void exchange_counts(const int32_t* send_counts, int32_t* recv_counts, int per_rank) override;
  void dispatch(float* dst, const float* src, float* staging, const ExchangeCounts& c,
                int width) override;
  void combine(float* dst, const float* src, float* staging, const ExchangeCounts& c,
               int width) override;

 private:
  // Rows sent to and received from each rank: the sums of c.send and c.recv per rank.
  void rank_rows(const ExchangeCounts& c);
  // Sends send_rows[d] rows to each rank d, receives recv_rows[s] rows from each rank s, and
  // waits for it.
  void exchange_rows(const float* send, const int32_t* send_rows, float* recv,
                     const int32_t* recv_rows, int width);

  std::shared_ptr<Communicator> ep_;
  std::vector<int32_t> send_rows_, recv_rows_;
  // Element counts handed to the communicator; they must outlive the call, hence members.
  std::vector<size_t> send_elems_, recv_elems_;
};

}  // namespace mt
