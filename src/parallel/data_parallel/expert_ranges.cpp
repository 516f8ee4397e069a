#include "parallel/data_parallel/expert_ranges.h"

#include <cstring>

#include "kernels/reduce.h"

namespace mt {

ExpertRanges::ExpertRanges(std::vector<std::pair<size_t, size_t>> ranges,
                           std::shared_ptr<Communicator> ep,
                           std::shared_ptr<Communicator> ep_replica)
    : ranges_(std::move(ranges)), ep_(std::move(ep)), ep_replica_(std::move(ep_replica)) {
  size_t total = 0;
  for (auto [flat, n] : ranges_) total += n;
  saved_.assign(total, 0.f);
}

void ExpertRanges::save_grads(const float* grads, size_t lo, size_t hi) {
  size_t off = 0;
  for (auto [flat, n] : ranges_) {
    if (flat >= lo && flat < hi) std::memcpy(saved_.data() + off, grads + flat, n * sizeof(float));
    off += n;
  }
}

void ExpertRanges::add_grads(const float* buf, size_t lo, size_t hi, float* packed) const {
  size_t off = 0;
  for (auto [flat, n] : ranges_) {
    if (flat >= lo && flat < hi) add_inplace(packed + off, buf + (flat - lo), n);
    off += n;
  }
}

void ExpertRanges::restore_grads(float* grads, ExposedTime& exposed) {
  if (empty()) return;
  if (replicas())
    exposed.wait(ep_replica_->all_reduce(saved_.data(), saved_.data(), saved_.size(), DType::f32,
                                         ReduceOp::sum));
  size_t off = 0;
  for (auto [flat, n] : ranges_) {
    std::memcpy(grads + flat, saved_.data() + off, n * sizeof(float));
    off += n;
  }
}

void ExpertRanges::reduce_packed(float* packed, ExposedTime& exposed) {
  if (empty() || !replicas()) return;
  exposed.wait(ep_replica_->all_reduce(packed, packed, saved_.size(), DType::f32, ReduceOp::sum));
}

void ExpertRanges::keep_params(const float* params) {
  size_t off = 0;
  for (auto [flat, n] : ranges_) {
    std::memcpy(saved_.data() + off, params + flat, n * sizeof(float));
    off += n;
  }
}

void ExpertRanges::restore_params(float* params) const {
  size_t off = 0;
  for (auto [flat, n] : ranges_) {
    std::memcpy(params + flat, saved_.data() + off, n * sizeof(float));
    off += n;
  }
}

}  // namespace mt
