// The tests' exchange double: a one-rank TokenExchange whose blocking calls go on to an
// IdentityExchange, so that a test overrides only the calls it watches (counts, records or
// logs) and calls this base for the rows. The started calls keep TokenExchange's defaults
// (the blocking call, then nothing in flight), so a double that watches a blocking call sees
// its started form too; one that watches the started forms themselves starts them on
// inner(). Unlike the identity it says rows travel (moves_rows), so the layer takes the
// expert-parallel path, as at ep > 1.
#pragma once

#include <cstdint>

#include "model/token_exchange.h"

namespace mt::moe_test {

class ForwardingExchange : public TokenExchange {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void exchange_counts(const int32_t* send, int32_t* recv, int per_rank) override {
    inner_.exchange_counts(send, recv, per_rank);
  }
  void dispatch(float* dst, const float* src, float* staging, const ExchangeCounts& c,
                int width) override {
    inner_.dispatch(dst, src, staging, c, width);
  }
  void combine(float* dst, const float* src, float* staging, const ExchangeCounts& c,
               int width) override {
    inner_.combine(dst, src, staging, c, width);
  }

 protected:
  IdentityExchange& inner() { return inner_; }

 private:
  IdentityExchange inner_;
};

}  // namespace mt::moe_test
