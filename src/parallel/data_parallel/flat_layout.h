// Where every parameter lives once data parallelism pads and shards the flat arena.
//
// The model's arena (table offsets) is cut into *units* (ModelChunk: the edge unit holding
// wte/wpe/ln_f, then one unit per block; with several chunks per rank, as interleaved
// pipelines hold, each chunk's units follow the previous chunk's). Each unit is copied into the
// *flat* space padded to a multiple of dp*16 floats, so that any run of whole units splits into dp
// equal, cache-line aligned chunks, however uneven the real sizes are.
//
// *Buckets* are runs of consecutive units in backward order (last block first, the edge
// unit always alone and last, since the tied wte is final only after the embedding's W
// pass), filled up to the bucket size, never across chunks (each chunk's backward runs on
// its own, in an order the schedule decides); with ZeRO-3 every unit is its own bucket (the
// gather granularity). Rank r owns chunk r of every bucket: the reduce-scatter of a
// bucket leaves each rank exactly its chunk, and its *shard* is the concatenation of its
// chunks in bucket order (bucket k's chunk at shard offset shard_off).
//
// Worked example, dp = 2, units of 100 (edge), 300 and 300 floats, one unit per bucket:
//   flat:  edge [0, 128)  block0 [128, 448)  block1 [448, 768)
//   buckets (backward order): 0 = block1, 1 = block0, 2 = edge; chunks 160, 160, 64
//   rank 1 owns flat [608, 768) [288, 448) [64, 128) at shard offsets 0, 160, 320.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "model/param_table.h"

namespace mt {

struct FlatUnit {
  size_t lo = 0, hi = 0;        // arena range (table offsets)
  size_t flat = 0, padded = 0;  // flat offset and padded length
  int bucket = -1;
  int chunk = 0;  // the model chunk holding the unit
};

struct FlatBucket {
  std::vector<int> units;  // in backward order
  size_t flat_lo = 0, flat_hi = 0;
  size_t chunk = 0;      // (flat_hi - flat_lo) / dp
  size_t shard_off = 0;  // of this rank's chunk in its shard
  size_t size() const { return flat_hi - flat_lo; }
  size_t owned_lo(int r) const { return flat_lo + size_t(r) * chunk; }
};

// One run of a tensor's elements that a rank updates: its position in the table layout,
// in the flat space, and in the rank's shard (only meaningful for owned pieces).
struct FlatPiece {
  size_t table_off, flat_off, shard_off, n;
  bool decay;
};

class FlatLayout {
 public:
  // unit_ranges: arena ranges of the units, ascending and disjoint. bucket_floats: the
  // bucket size; one_unit_per_bucket for ZeRO-3. units_per_chunk: how many consecutive
  // units each chunk has (its edge unit first); empty: one chunk holding every unit.
  // Buckets come chunk by chunk, each chunk's in its backward order. min_block_buckets: a
  // chunk's block buckets hold at most that share of its block gradients (block_bucket_cap).
  // whole_blocks > 1: a chunk's blocks split only into buckets of a multiple of whole_blocks
  // blocks, or not at all (blocks_per_bucket).
  FlatLayout(const ParamTable& table, const std::vector<std::pair<size_t, size_t>>& unit_ranges,
             int dp, int dp_rank, size_t bucket_floats, bool one_unit_per_bucket,
             const std::vector<int>& units_per_chunk = {}, int min_block_buckets = 1,
             int whole_blocks = 1);

  // What ZeRO 0-2 pass as min_block_buckets. The bucket of a chunk's first block launches
  // only when the chunk's backward is over, so nothing overlaps its reduction: with a model
  // smaller than --bucket-mb (25 MiB), one bucket held every block and the whole reduction
  // (12.6 MB at 4L d256) ran after the backward, its gradients long out of the caches. With
  // a quarter per bucket, the other three are reduced at the safe points between layers
  // while their gradients are still warm, and the tail is a quarter. At ZeRO 1-2 a bucket
  // also decides which rank owns (and keeps optimizer state for) which elements: four
  // buckets give each rank a chunk of every quarter instead of one half of the blocks,
  // the same number of elements (the equal split holds per bucket). Under expert
  // parallelism at ZeRO 1-2 (DataParallel::flat_layout) ep keeps experts whole, so a
  // bucket of one block would give the rank owning its first part the block's dense
  // elements and the next rank mostly experts it does not own: there the quarters are
  // rounded to whole blocks per rank (whole_blocks = dp, blocks_per_bucket).
  static constexpr int kBlockBuckets = 4;

  size_t flat_size() const { return flat_size_; }
  size_t shard_size() const { return flat_size_ / size_t(dp_); }
  const std::vector<FlatUnit>& units() const { return units_; }
  const std::vector<FlatBucket>& buckets() const { return buckets_; }
  int num_chunks() const { return int(chunk_first_.size()); }
  // Global number of a chunk's unit 0, the edge unit (embedding, ln_f and the tied head;
  // empty on middle chunks).
  int first_unit(int chunk) const { return chunk_first_[size_t(chunk)]; }
  bool is_edge(int u) const { return u == first_unit(units_[size_t(u)].chunk); }
  // Pieces of every real element (owned_only = false) or of this rank's chunks only.
  std::vector<FlatPiece> pieces(bool owned_only) const;

 private:
  // The fill limit of a chunk's block buckets (units first+1 .. first+count-1): at most
  // bucket_floats, and at most a 1/min_block_buckets share of the chunk's block gradients.
  size_t block_bucket_cap(int first, int count, size_t bucket_floats, int min_block_buckets) const;
  // With whole_blocks > 1: how many blocks each of a chunk's block buckets holds (its last
  // bucket, the chunk's first blocks, the rest), a multiple of whole_blocks, so that with
  // whole_blocks = dp each rank owns whole blocks of every bucket and as many as every other
  // rank. 0 (the size rule applies) unless the chunk's blocks are all of one padded size, a
  // multiple of whole_blocks in number, and the bucket size holds whole_blocks of them.
  int blocks_per_bucket(int first, int count, size_t bucket_floats, int min_block_buckets,
                        int whole_blocks) const;
  // Flat offset of a table offset inside unit u.
  size_t flat_of(int u, size_t table_off) const {
    return units_[u].flat + table_off - units_[u].lo;
  }

  const ParamTable& table_;
  int dp_, rank_;
  size_t flat_size_ = 0;
  std::vector<FlatUnit> units_;
  std::vector<FlatBucket> buckets_;
  std::vector<int> chunk_first_;
};

}  // namespace mt
