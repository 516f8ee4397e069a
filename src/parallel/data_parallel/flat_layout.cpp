#include "parallel/data_parallel/flat_layout.h"

#include <algorithm>

#include "core/error.h"

namespace mt {

size_t FlatLayout::block_bucket_cap(int first, int count, size_t bucket_floats,
                                    int min_block_buckets) const {
  size_t blocks = 0;
  for (int u = first + 1; u < first + count; ++u) blocks += units_[size_t(u)].padded;
  const size_t share = (blocks + size_t(min_block_buckets) - 1) / size_t(min_block_buckets);
  return std::min(bucket_floats, share);
}

int FlatLayout::blocks_per_bucket(int first, int count, size_t bucket_floats, int min_block_buckets,
                                  int whole_blocks) const {
  const int blocks = count - 1;
  if (whole_blocks <= 1 || blocks < whole_blocks || blocks % whole_blocks != 0) return 0;
  const size_t size = units_[size_t(first + 1)].padded;
  for (int u = first + 1; u < first + count; ++u)
    if (units_[size_t(u)].padded != size) return 0;  // e.g. dense blocks before MoE ones
  if (size == 0 || bucket_floats / size < size_t(whole_blocks)) return 0;
  auto round_up = [&](int n) { return (n + whole_blocks - 1) / whole_blocks * whole_blocks; };
  const int share = round_up((blocks + min_block_buckets - 1) / min_block_buckets);
  const size_t fit = std::min(bucket_floats / size, size_t(blocks));  // --bucket-mb still caps
  const int capped = int(fit) / whole_blocks * whole_blocks;
  return std::min(share, capped);
}

FlatLayout::FlatLayout(const ParamTable& table,
                       const std::vector<std::pair<size_t, size_t>>& unit_ranges, int dp,
                       int dp_rank, size_t bucket_floats, bool one_unit_per_bucket,
                       const std::vector<int>& units_per_chunk, int min_block_buckets,
                       int whole_blocks)
    : table_(table), dp_(dp), rank_(dp_rank) {
  MT_CHECK(dp >= 1 && dp_rank >= 0 && dp_rank < dp && !unit_ranges.empty());
  MT_CHECK(min_block_buckets >= 1 && whole_blocks >= 1, "min_block_buckets ", min_block_buckets,
           " whole_blocks ", whole_blocks);
  const size_t quantum = size_t(dp) * 16;
  units_.reserve(unit_ranges.size()), buckets_.reserve(unit_ranges.size());
  size_t prev_hi = 0;
  for (auto [lo, hi] : unit_ranges) {
    MT_CHECK(lo >= prev_hi && hi >= lo, "units must be ascending and disjoint");
    prev_hi = hi;
    FlatUnit u;
    u.lo = lo;
    u.hi = hi;
    u.flat = flat_size_;
    u.padded = (hi - lo + quantum - 1) / quantum * quantum;
    flat_size_ += u.padded;
    units_.push_back(u);
  }
  std::vector<int> per_chunk = units_per_chunk;
  if (per_chunk.empty()) per_chunk = {int(units_.size())};
  auto open_bucket = [&](int u) {
    FlatBucket b;
    b.units = {u};
    b.flat_lo = units_[u].flat;
    b.flat_hi = units_[u].flat + units_[u].padded;
    buckets_.push_back(b);
  };
  int first = 0;
  for (int count : per_chunk) {
    MT_CHECK(count >= 1, "a chunk has at least its edge unit");
    MT_CHECK(first + count <= int(units_.size()), "units_per_chunk covers more than ",
             units_.size(), " units");
    chunk_first_.push_back(first);
    for (int u = first; u < first + count; ++u) units_[size_t(u)].chunk = num_chunks() - 1;
    // Backward order: blocks last to first, then the edge unit on its own.
    const size_t chunk_buckets = buckets_.size();
    size_t cap = block_bucket_cap(first, count, bucket_floats, min_block_buckets);
    const int per_bucket =
        blocks_per_bucket(first, count, bucket_floats, min_block_buckets, whole_blocks);
    if (whole_blocks > 1 && per_bucket == 0) cap = bucket_floats;  // the plain size rule
    for (int u = first + count - 1; u >= first + 1; --u) {
      FlatBucket* cur = buckets_.size() > chunk_buckets ? &buckets_.back() : nullptr;
      const bool fits = per_bucket > 0 ? int(cur ? cur->units.size() : 0) < per_bucket
                                       : cur && cur->size() + units_[u].padded <= cap;
      if (cur && !one_unit_per_bucket && fits) {
        cur->units.push_back(u);
        cur->flat_lo = units_[u].flat;  // descending units: the bucket grows downwards
      } else {
        open_bucket(u);
      }
    }
    open_bucket(first);
    first += count;
  }
  MT_CHECK(first == int(units_.size()), "units_per_chunk covers ", first, " of ", units_.size(),
           " units");
  size_t shard_off = 0;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    FlatBucket& b = buckets_[k];
    b.chunk = b.size() / size_t(dp);
    b.shard_off = shard_off;
    shard_off += b.chunk;
    for (int u : b.units) units_[u].bucket = int(k);
  }
}

std::vector<FlatPiece> FlatLayout::pieces(bool owned_only) const {
  std::vector<FlatPiece> out;
  for (const ParamInfo& p : table_.entries()) {
    // Units are ascending and disjoint: the last one starting at or before the tensor.
    const auto next = std::upper_bound(units_.begin(), units_.end(), p.offset,
                                       [](size_t off, const FlatUnit& fu) { return off < fu.lo; });
    const int u = int(next - units_.begin()) - 1;
    MT_CHECK(u >= 0 && p.offset < units_[u].hi, "parameter ", p.name, " lies in no unit");
    const FlatBucket& b = buckets_[units_[u].bucket];
    const size_t f0 = flat_of(u, p.offset), f1 = f0 + p.numel;
    size_t lo = f0, hi = f1;
    if (owned_only) {
      lo = std::max(f0, b.owned_lo(rank_));
      hi = std::min(f1, b.owned_lo(rank_) + b.chunk);
    }
    if (lo >= hi) continue;
    out.push_back(
        {p.offset + (lo - f0), lo, b.shard_off + (lo - b.owned_lo(rank_)), hi - lo, p.decay()});
  }
  return out;
}

}  // namespace mt
