#include "parallel/expert_parallel/token_dispatcher.h"

#include "core/error.h"
#include "kernels/token_permutation.h"

namespace mt {

TokenDispatcher::TokenDispatcher(std::shared_ptr<Communicator> ep)
    : ep_(std::move(ep)),
      send_rows_(ep_->size()),
      recv_rows_(ep_->size()),
      send_elems_(ep_->size()),
      recv_elems_(ep_->size()) {}

void TokenDispatcher::exchange_counts(const int32_t* send_counts, int32_t* recv_counts,
                                      int per_rank) {
  for (int d = 0; d < size(); ++d) send_elems_[d] = recv_elems_[d] = size_t(per_rank);
  WaitedAtOnce at_once;
  ep_->all_to_all_v(send_counts, send_elems_.data(), recv_counts, recv_elems_.data(), DType::i32)
      .wait();
}

void TokenDispatcher::rank_rows(const ExchangeCounts& c) {
  for (int d = 0; d < size(); ++d) {
    send_rows_[d] = recv_rows_[d] = 0;
    for (int e = 0; e < c.per_rank; ++e) {
      send_rows_[d] += c.send[d * c.per_rank + e];
      recv_rows_[d] += c.recv[d * c.per_rank + e];
    }
  }
}

void TokenDispatcher::exchange_rows(const float* send, const int32_t* send_rows, float* recv,
                                    const int32_t* recv_rows, int width) {
  for (int d = 0; d < size(); ++d) {
    MT_CHECK(send_rows[d] >= 0 && recv_rows[d] >= 0, "negative row count");
    send_elems_[d] = size_t(send_rows[d]) * width;
    recv_elems_[d] = size_t(recv_rows[d]) * width;
  }
  WaitedAtOnce at_once;  // no wake-up of the ep communicator's progress thread
  ep_->all_to_all_v(send, send_elems_.data(), recv, recv_elems_.data(), DType::f32).wait();
}

void TokenDispatcher::dispatch(float* dst, const float* src, float* staging,
                               const ExchangeCounts& c, int width) {
  rank_rows(c);
  exchange_rows(src, send_rows_.data(), staging, recv_rows_.data(), width);
  regroup_blocks(dst, staging, c.recv, size(), c.per_rank, width, /*to_expert_major=*/true);
}

void TokenDispatcher::combine(float* dst, const float* src, float* staging, const ExchangeCounts& c,
                              int width) {
  rank_rows(c);
  regroup_blocks(staging, src, c.recv, size(), c.per_rank, width, /*to_expert_major=*/false);
  exchange_rows(staging, recv_rows_.data(), dst, send_rows_.data(), width);
}

}  // namespace mt
