// Expert-parallel token exchange over the ep communicator (ParallelContext::ep): the
// TokenExchange a MoeLayer calls to send rows to the ranks owning their experts and back.
//
// Protocol for one dispatch (and its mirror image for combine and in backward):
//   1. counts: an all-to-all-v of E/ep int32 per peer — how many rows this rank sends to
//      each of the peer's local experts; each rank learns what it will receive.
//   2. payload: an all-to-all-v of the rows, already grouped by destination rank (and by
//      expert inside it) by the local permutation (kernels/token_permutation.h).
// Combine sends the expert outputs back with the count arrays swapped; the counts of step 1
// are kept in the microbatch's slot, so combine and both backward exchanges need no
// further count exchange.
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
  Work exchange_rows(const float* send, const int32_t* send_rows, float* recv,
                     const int32_t* recv_rows, int width) override;

 private:
  std::shared_ptr<Communicator> ep_;
  // Element counts handed to the communicator; they must outlive the call, hence members.
  std::vector<size_t> send_elems_, recv_elems_;
};

}  // namespace mt
