// Expert parallelism inside data parallelism (docs/moe.md, "Integration"; ZeRO 0-2).
//
// Every dp rank's table has the same shape (E/ep experts per MoE layer), so the flat
// layouts line up, but the same offsets hold different experts on the ranks of an ep
// group. The dp reduction must therefore leave the experts' ranges alone: before a
// bucket's reduction mixes them, their local gradients are copied aside (stages 0-1) or
// added into their own packed slot after the gradient shard (stage 2), and once every
// bucket is done they are summed over ep_replica, the dp ranks holding the same experts.
// Every rank updates its experts in full (ZeRO does not shard them), so the ZeRO 1-2
// parameter all-gather, which would bring in other ranks' experts, is bracketed by
// keep_params / restore_params.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "parallel/data_parallel/exposed_time.h"

namespace mt {

class ExpertRanges {
 public:
  ExpertRanges() = default;  // no expert parallelism
  // ranges: flat (offset, n) of this rank's expert pieces, in the order their gradients
  // are packed. ep: the expert-parallel group (the experts' share of the gradient norm
  // adds up over it); ep_replica: the ranks holding the same experts.
  ExpertRanges(std::vector<std::pair<size_t, size_t>> ranges, std::shared_ptr<Communicator> ep,
               std::shared_ptr<Communicator> ep_replica);

  bool empty() const { return ranges_.empty(); }
  size_t floats() const { return saved_.size(); }  // expert elements of this rank
  Communicator* ep() const { return ep_.get(); }

  // Stages 0-1, just before the dp reduction of the bucket covering flat [lo, hi): keeps
  // this rank's local expert gradients of that range (grads: the flat gradients).
  void save_grads(const float* grads, size_t lo, size_t hi);
  // Stage 2: adds the local expert gradients of a bucket buffer (flat [lo, hi) at buf)
  // into packed (floats() floats, in range order).
  void add_grads(const float* buf, size_t lo, size_t hi, float* packed) const;
  // After every bucket. Stages 0-1: puts the kept gradients, summed over ep_replica, back
  // into the flat gradients. Stage 2: sums the packed gradients over ep_replica.
  void restore_grads(float* grads, ExposedTime& exposed);
  void reduce_packed(float* packed, ExposedTime& exposed);
  // Around the ZeRO 1-2 parameter all-gather (params: the flat parameters).
  void keep_params(const float* params);
  void restore_params(float* params) const;

 private:
  bool replicas() const { return ep_replica_ && ep_replica_->size() > 1; }

  std::vector<std::pair<size_t, size_t>> ranges_;  // (flat offset, n)
  std::vector<float> saved_;                       // packed in ranges_ order
  std::shared_ptr<Communicator> ep_, ep_replica_;
};

}  // namespace mt
