#include "parallel/data_parallel/grad_buckets.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/reduce.h"

namespace mt {

GradBuckets::GradBuckets(const FlatLayout& layout, Communicator& dp, int zero,
                         ExpertRanges& experts, ExposedTime& exposed,
                         std::vector<int> passes_per_microbatch)
    : layout_(layout),
      dp_(dp),
      zero_(zero),
      rank_(dp.rank()),
      size_(dp.size()),
      experts_(experts),
      exposed_(exposed),
      users_(std::move(passes_per_microbatch)) {
  if (users_.empty()) users_.assign(layout_.units().size(), 1);
  MT_CHECK(users_.size() == layout_.units().size(), "passes per microbatch for ", users_.size(),
           " of ", layout_.units().size(), " units");
  const size_t nb = layout_.buckets().size();
  edge_bucket_.assign(nb, 0);
  for (int c = 0; c < layout_.num_chunks(); ++c)
    edge_bucket_[size_t(layout_.units()[size_t(layout_.first_unit(c))].bucket)] = 1;
  bucket_pool_.assign(nb, -1);
  bucket_done_.assign(nb, 0);
  reduced_.assign(nb, 0);
  passes_.assign(layout_.units().size(), 0);
  const Sizes s = sizes(layout_, zero_, experts_.floats());
  (zero_ < 2 ? flat_ : shard_).resize(s.storage);
  for (size_t n : s.pool) pool_.emplace_back(n);
  pool_bucket_.assign(pool_.size(), -1);
}

GradBuckets::Sizes GradBuckets::sizes(const FlatLayout& layout, int zero, size_t expert_floats) {
  Sizes s;
  if (zero < 2) {
    s.storage = layout.flat_size();
    return s;
  }
  s.storage = layout.shard_size() + expert_floats;
  size_t edge_bucket = 0, block_bucket = 0;
  std::vector<int> block_buckets(size_t(layout.num_chunks()), 0);  // per chunk
  for (const FlatBucket& b : layout.buckets()) {
    const FlatUnit& first = layout.units()[size_t(b.units[0])];
    const bool edge = layout.is_edge(b.units[0]);  // an edge unit is a bucket of its own
    size_t& m = edge ? edge_bucket : block_bucket;
    m = std::max(m, b.size());
    if (!edge) ++block_buckets[size_t(first.chunk)];
  }
  const int block_buffers =
      std::min(2, *std::max_element(block_buckets.begin(), block_buckets.end()));
  s.pool.push_back(edge_bucket);
  for (int i = 0; i < block_buffers; ++i) s.pool.push_back(block_bucket);
  return s;
}

GradBuckets::~GradBuckets() {
  // Never leave a collective writing into freed buffers.
  try {
    while (!inflight_.empty()) reclaim_oldest();
  } catch (...) {
  }
}

void GradBuckets::begin_step(int microbatches) {
  MT_CHECK(microbatches >= 1, "begin_step(", microbatches, ")");
  MT_CHECK(inflight_.empty(), "begin_step with bucket reductions in flight (no finish)");
  microbatches_ = microbatches;
  std::fill(passes_.begin(), passes_.end(), 0);
  std::fill(reduced_.begin(), reduced_.end(), 0);
  if (zero_ < 2)
    flat_.zero();
  else
    shard_.zero();
}

float* GradBuckets::before_grads(int unit) {
  if (zero_ < 2) return nullptr;
  const FlatUnit& u = layout_.units()[size_t(unit)];
  const int k = u.bucket;
  if (bucket_pool_[size_t(k)] < 0) {
    const int i = acquire_pool(k);
    pool_bucket_[size_t(i)] = k;
    bucket_pool_[size_t(k)] = i;
    std::memset(pool_[size_t(i)].data(), 0, layout_.buckets()[size_t(k)].size() * sizeof(float));
  }
  return pool_[size_t(bucket_pool_[size_t(k)])].data() +
         (u.flat - layout_.buckets()[size_t(k)].flat_lo);
}

void GradBuckets::grads_final(int unit) {
  const int pass = ++passes_[size_t(unit)], due = expected_passes(size_t(unit));
  MT_CHECK(pass <= due, "unit ", unit, ": backward pass ", pass, " of a step announced as ", due,
           " (begin_step)");
  // Stages 0-1 accumulate locally and reduce once, after the unit's last pass.
  if (zero_ < 2 && pass < due) return;
  const int k = layout_.units()[size_t(unit)].bucket;
  if (++bucket_done_[size_t(k)] == int(layout_.buckets()[size_t(k)].units.size())) launch(k);
}

void GradBuckets::finish(const std::function<bool()>& while_waiting) {
  while (!inflight_.empty()) {
    // test() also advances the queue: this rank runs its share of a reduction whose peers
    // have arrived before it looks for other work.
    if (while_waiting && !inflight_.front().work.test() && while_waiting()) continue;
    reclaim_oldest();
  }
  for (size_t u = 0; u < passes_.size(); ++u)
    MT_CHECK(layout_.units()[u].padded == 0 || passes_[u] == expected_passes(u), "unit ", u,
             " ran ", passes_[u], " of the ", expected_passes(u),
             " backward passes announced by begin_step");
  if (zero_ >= 2)
    experts_.reduce_packed(shard_.data() + layout_.shard_size(), exposed_);
  else if (zero_ < 2)
    experts_.restore_grads(flat_.data(), exposed_);
}

void GradBuckets::poll() {
  for (InFlight& f : inflight_) f.work.test();
}

size_t GradBuckets::buffer_bytes() const {
  size_t n = 0;
  for (const Arena& a : pool_) n += a.bytes();
  return n;
}

size_t GradBuckets::bytes() const {
  return flat_.bytes() + shard_.bytes() + buffer_bytes();
}

void GradBuckets::launch(int k) {
  const FlatBucket& b = layout_.buckets()[size_t(k)];
  bucket_done_[size_t(k)] = 0;
  if (zero_ < 2) {
    float* g = flat_.data() + b.flat_lo;
    if (local_ && within_) {  // ZeRO 0 (checked): the replica's own sum over its cp ranks
      inflight_.push_back({k, -1, within_->all_reduce(g, g, b.size(), DType::f32, ReduceOp::sum)});
      return;
    }
    if (size_ == 1 || local_) {
      reduced_[size_t(k)] = 1;  // nothing to wait for: final now
      return;
    }
    // Another dp rank's same offsets hold other experts: keep this rank's local ones.
    experts_.save_grads(flat_.data(), b.flat_lo, b.flat_lo + b.size());
    Work w = zero_ == 0 ? dp_.all_reduce(g, g, b.size(), DType::f32, ReduceOp::sum)
                        : dp_.reduce_scatter(g, flat_.data() + b.owned_lo(rank_), b.chunk,
                                             DType::f32, ReduceOp::sum);
    inflight_.push_back({k, -1, std::move(w)});
    return;
  }
  const int i = bucket_pool_[size_t(k)];
  MT_CHECK(i >= 0, "bucket ", k, " launched without a gradient buffer");
  bucket_pool_[size_t(k)] = -1;
  float* buf = pool_[size_t(i)].data();
  // This pass's local expert gradients go to their own slot after the shard before the
  // reduce-scatter sums other ranks' experts into them.
  experts_.add_grads(buf, b.flat_lo, b.flat_hi, shard_.data() + layout_.shard_size());
  Work w;
  if (size_ > 1)
    w = dp_.reduce_scatter(buf, buf + size_t(rank_) * b.chunk, b.chunk, DType::f32, ReduceOp::sum);
  inflight_.push_back({k, i, std::move(w)});
}

void GradBuckets::reclaim_oldest() {
  InFlight f = std::move(inflight_.front());
  inflight_.pop_front();
  exposed_.wait(std::move(f.work));
  reduced_[size_t(f.bucket)] = 1;
  if (f.pool < 0) return;
  const FlatBucket& b = layout_.buckets()[size_t(f.bucket)];
  add_inplace(shard_.data() + b.shard_off, pool_[size_t(f.pool)].data() + size_t(rank_) * b.chunk,
              b.chunk);
  pool_bucket_[size_t(f.pool)] = -1;
}

int GradBuckets::acquire_pool(int bucket) {
  const bool edge = edge_bucket_[size_t(bucket)];
  for (;;) {
    for (size_t i = edge ? 0 : 1; i < (edge ? 1 : pool_.size()); ++i)
      if (pool_bucket_[i] < 0) return int(i);
    MT_CHECK(!inflight_.empty(), "no free gradient bucket buffer");
    reclaim_oldest();
  }
}

}  // namespace mt
