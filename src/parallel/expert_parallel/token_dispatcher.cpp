#include "parallel/expert_parallel/token_dispatcher.h"

#include "core/error.h"

namespace mt {

TokenDispatcher::TokenDispatcher(std::shared_ptr<Communicator> ep)
    : ep_(std::move(ep)), send_elems_(ep_->size()), recv_elems_(ep_->size()) {}

void TokenDispatcher::exchange_counts(const int32_t* send_counts, int32_t* recv_counts,
                                      int per_rank) {
  for (int d = 0; d < size(); ++d) send_elems_[d] = recv_elems_[d] = size_t(per_rank);
  WaitedAtOnce at_once;
  ep_->all_to_all_v(send_counts, send_elems_.data(), recv_counts, recv_elems_.data(), DType::i32)
      .wait();
}

Work TokenDispatcher::exchange_rows(const float* send, const int32_t* send_rows, float* recv,
                                    const int32_t* recv_rows, int width) {
  for (int d = 0; d < size(); ++d) {
    MT_CHECK(send_rows[d] >= 0 && recv_rows[d] >= 0, "negative row count");
    send_elems_[d] = size_t(send_rows[d]) * width;
    recv_elems_[d] = size_t(recv_rows[d]) * width;
  }
  return ep_->all_to_all_v(send, send_elems_.data(), recv, recv_elems_.data(), DType::f32);
}

}  // namespace mt
