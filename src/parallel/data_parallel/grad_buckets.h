// The bucketed gradient reduction over dp (docs/data_parallel.md, "Buckets", "Reduction").
//
// Stages 0-1 hold the full flat gradients: every backward pass accumulates into them, and
// after a unit's last pass of the step its bucket is all-reduced (stage 0) or
// reduce-scattered in place (stage 1). Stages 2-3 hold only this rank's shard: each pass
// accumulates a bucket into a pooled buffer, whose reduce-scatter is added into the shard
// when it comes back (DeepSpeed's ZeRO-2). A bucket is launched asynchronously as soon as
// its last unit is final, so the reduction overlaps the rest of backward.
//
// Passes. begin_step(m) announces that every chunk runs m backward passes (fused
// backwards or W passes) this step; grads_final counts them per unit, so stages 0-1
// launch a bucket after its units' m-th pass, whatever order a pipeline schedule runs
// chunks and microbatches in (interleaved: one chunk's last pass may precede another's
// first; zb-h1: the W passes come late). An edge unit shared by two chunks (data_parallel.h)
// gets 2m. Forward-only passes never reach grads_final.
//
// Pool (stages 2-3). Buffer 0 holds a chunk's edge bucket, open through the chunk's whole
// pass (the tied wte is final only after the embedding's W pass), sized for the largest
// chunk edge. The block buckets take turns in the other buffers, sized for the largest
// block bucket: one filling while the previous one is in flight, so two when some chunk
// has two block buckets or more. When none has (a chunk of one block, or a model smaller
// than --bucket-mb whose blocks cannot split evenly under expert parallelism,
// FlatLayout::blocks_per_bucket), a second buffer
// would only spare the next pass a wait for the previous reduce-scatter, at the cost of
// another copy of the chunk's block gradients: one is kept. Each pass opens and
// closes all of its chunk's buckets, so the chunks share the pool.
#pragma once

#include <deque>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "core/arena.h"
#include "parallel/data_parallel/expert_ranges.h"
#include "parallel/data_parallel/exposed_time.h"
#include "parallel/data_parallel/flat_layout.h"

namespace mt {

class GradBuckets {
 public:
  // experts: this rank's expert ranges (empty: none), kept out of the dp reduction.
  // passes_per_microbatch: per unit, the chunks whose backward passes accumulate into it
  // (1, or 2 for an edge unit shared by the embedding's and the head's chunks); empty: 1.
  GradBuckets(const FlatLayout& layout, Communicator& dp, int zero, ExpertRanges& experts,
              ExposedTime& exposed, std::vector<int> passes_per_microbatch = {});
  // What the constructor allocates for a layout, in floats: the storage (the flat
  // gradients, or the shard and the experts' packed gradients) and the pool's buffers
  // (stages 2-3: the edge buffer, then the block buffers). The memory estimate asks it.
  struct Sizes {
    size_t storage = 0;
    std::vector<size_t> pool;
  };
  static Sizes sizes(const FlatLayout& layout, int zero, size_t expert_floats);
  ~GradBuckets();  // waits for the reductions in flight
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Stages 0-1: the flat gradients (layout.flat_size()). Stages 2-3: the shard
  // (layout.shard_size()), followed under expert parallelism by the packed gradients of
  // this rank's experts.
  float* storage() { return zero_ >= 2 ? shard_.data() : flat_.data(); }
  const float* storage() const { return zero_ >= 2 ? shard_.data() : flat_.data(); }
  // Zeroes the gradients; every chunk will run `microbatches` backward passes.
  void begin_step(int microbatches);
  // Stages 2-3: where the unit's gradients accumulate in this pass (its flat offset
  // layout.units()[unit].flat in its bucket's buffer, opened and zeroed on the bucket's
  // first unit). Stages 0-1: null (they accumulate into storage()).
  float* before_grads(int unit);
  // The unit's gradients of this pass are complete; launches its bucket when it is due.
  void grads_final(int unit);
  // Waits for every bucket and puts the experts' gradients in place (summed over
  // ep_replica). Every unit with parameters must have run the announced passes.
  // while_waiting (optional): called instead of blocking while the oldest reduction is not
  // back, until it returns false (nothing left to do); the work it does must not touch a
  // bucket that is still in flight (reduced() says which are back).
  void finish(const std::function<bool()>& while_waiting = {});
  // Per bucket: its reduction of this step has come back (or none was needed), so its
  // part of storage() is final until the next begin_step (stages 0-1; experts aside).
  const std::vector<char>& reduced() const { return reduced_; }
  // Tests the reductions in flight (Open MPI progresses only inside MPI calls).
  void poll();
  // Local steps (--dp-sync local:H / diloco:H, ZeRO 0): the gradients stay this replica's
  // own (no dp reduction) until set back to false. within (null: none): the ranks of the
  // replica whose gradients are partial sums of its own (its cp group), still all-reduced.
  void set_local(bool local, Communicator* within = nullptr) {
    local_ = local;
    within_ = within && within->size() > 1 ? within : nullptr;
  }

  // A buffer for bindings that are never read (ZeRO-3 units before their first use).
  float* scratch() {
    if (zero_ < 2) return flat_.data();
    return pool_.empty() ? nullptr : pool_[0].data();
  }
  size_t buffer_bytes() const;  // the pool
  size_t bytes() const;         // everything held, the pool included

 private:
  struct InFlight {
    int bucket, pool;  // pool < 0: reduced in place in flat_
    Work work;
  };
  void launch(int bucket);
  bool local_ = false;
  Communicator* within_ = nullptr;
  void reclaim_oldest();
  int acquire_pool(int bucket);

  const FlatLayout& layout_;
  Communicator& dp_;
  const int zero_, rank_, size_;
  ExpertRanges& experts_;
  ExposedTime& exposed_;
  Arena flat_;   // stages 0-1
  Arena shard_;  // stages 2-3 (+ the experts' packed gradients)
  std::vector<Arena> pool_;
  std::vector<int> pool_bucket_, bucket_pool_;  // which bucket holds a buffer, and back
  std::vector<int> bucket_done_;                // units of the bucket final in this pass
  std::vector<char> reduced_;                   // reduced(): per bucket, back this step
  std::vector<char> edge_bucket_;               // per bucket: holds a chunk's edge unit
  std::deque<InFlight> inflight_;
  int microbatches_ = 0;     // passes per chunk announced by begin_step
  std::vector<int> passes_;  // per unit: passes completed this step
  std::vector<int> users_;   // per unit: passes per microbatch
  int expected_passes(size_t unit) const { return microbatches_ * users_[unit]; }
};

}  // namespace mt
