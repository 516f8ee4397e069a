// The communication a mixture-of-experts layer needs under expert parallelism, as an
// interface: model/ may not depend on parallel/, so the layer calls this and
// parallel/expert_parallel/token_dispatcher.h implements it over the ep communicator.
//
// Rows are token vectors of `width` floats. Dispatch (rows to the ranks owning their
// experts) and combine (results back to the token's rank) are the same all-to-all-v with
// the count arrays swapped; each is the other's adjoint in backward.
#pragma once

#include <cstdint>

#include "comm/communicator.h"

namespace mt {

class TokenExchange {
 public:
  virtual ~TokenExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // send_counts[d * per_rank + i]: rows this rank sends for local expert i of rank d;
  // recv_counts[s * per_rank + i]: rows rank s sends for this rank's local expert i.
  // Blocking (the payload sizes depend on it).
  virtual void exchange_counts(const int32_t* send_counts, int32_t* recv_counts, int per_rank) = 0;

  // send holds send_rows[d] rows for each rank d in rank order; recv gets recv_rows[s] rows
  // from each rank s in rank order. Asynchronous: the buffers and count arrays must stay
  // untouched until the Work completes; at most one exchange may be in flight.
  virtual Work exchange_rows(const float* send, const int32_t* send_rows, float* recv,
                             const int32_t* recv_rows, int width) = 0;
};

}  // namespace mt
