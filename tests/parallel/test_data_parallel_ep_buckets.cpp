// ZeRO 1-2 under expert parallelism split a chunk's blocks into buckets of whole blocks per
// rank (FlatLayout::blocks_per_bucket, whole_blocks = dp): about a quarter of the blocks
// each, rounded up to a multiple of dp, so each bucket's reduce-scatter runs under the rest
// of the backward and every rank still owns as many whole blocks (dense elements and
// experts alike) as every other rank. Where that cannot hold (blocks of different sizes, a
// count that is no multiple of dp, --bucket-mb below dp blocks) the chunk keeps the plain
// size rule, as before stop 48.
#include <gtest/gtest.h>

#include <vector>

#include "parallel/data_parallel/data_parallel.h"
#include "parallel/data_parallel/flat_layout.h"

namespace mt {
namespace {

constexpr size_t kBlock = 16 * 4 * 30;  // a multiple of dp*16 at dp 2 and 4: no padding

// An edge unit of kBlock/2, then blocks of the given sizes.
std::vector<std::pair<size_t, size_t>> units(const std::vector<size_t>& blocks) {
  std::vector<std::pair<size_t, size_t>> u{{0, kBlock / 2}};
  for (size_t n : blocks) u.push_back({u.back().second, u.back().second + n});
  return u;
}

std::vector<std::vector<int>> block_buckets(const std::vector<size_t>& blocks, int dp, int zero,
                                            double bucket_mb = 25) {
  const ParamTable no_tensors;
  const FlatLayout l =
      DataParallel::flat_layout(no_tensors, units(blocks), {int(blocks.size()) + 1}, dp, 0, zero,
                                bucket_mb, /*experts_apart=*/true);
  std::vector<std::vector<int>> out;
  for (const FlatBucket& b : l.buckets())
    if (!l.is_edge(b.units[0])) out.push_back(b.units);
  return out;
}

TEST(DataParallelEpBuckets, QuartersRoundedToWholeBlocksPerRank) {
  for (int zero : {1, 2}) {
    using V = std::vector<std::vector<int>>;
    const std::vector<size_t> eight(8, kBlock), twelve(12, kBlock), ten(10, kBlock);
    EXPECT_EQ(block_buckets(eight, 2, zero), (V{{8, 7}, {6, 5}, {4, 3}, {2, 1}}));
    EXPECT_EQ(block_buckets(twelve, 2, zero), (V{{12, 11, 10, 9}, {8, 7, 6, 5}, {4, 3, 2, 1}}));
    // The first blocks' bucket (reduced last) takes what is left, still whole blocks per rank.
    EXPECT_EQ(block_buckets(ten, 2, zero), (V{{10, 9, 8, 7}, {6, 5, 4, 3}, {2, 1}}));
    EXPECT_EQ(block_buckets(eight, 4, zero), (V{{8, 7, 6, 5}, {4, 3, 2, 1}}));
  }
}

TEST(DataParallelEpBuckets, EveryRankOwnsWholeBlocksOfEveryBucket) {
  const ParamTable no_tensors;
  for (int dp : {2, 4})
    for (int rank = 0; rank < dp; ++rank) {
      const FlatLayout l = DataParallel::flat_layout(
          no_tensors, units(std::vector<size_t>(8, kBlock)), {9}, dp, rank, 1, 25, true);
      for (const FlatBucket& b : l.buckets()) {
        if (l.is_edge(b.units[0])) continue;
        EXPECT_EQ(b.chunk % kBlock, 0u) << "dp " << dp;
        EXPECT_EQ(b.chunk, b.units.size() / size_t(dp) * kBlock) << "dp " << dp;
        EXPECT_EQ((b.owned_lo(rank) - l.units()[1].flat) % kBlock, 0u) << "dp " << dp;
      }
    }
}

// Where whole blocks per rank cannot hold, the plain rule: every block in one bucket (the
// model is far below --bucket-mb), or one per bucket when --bucket-mb holds fewer than dp.
TEST(DataParallelEpBuckets, UnevenChunksKeepThePlainRule) {
  using V = std::vector<std::vector<int>>;
  const V all5{{5, 4, 3, 2, 1}};
  EXPECT_EQ(block_buckets(std::vector<size_t>(5, kBlock), 2, 1), all5);  // 5 blocks, dp 2
  // Dense blocks between MoE ones (moe_every 2): the units differ in size.
  EXPECT_EQ(block_buckets({kBlock, 2 * kBlock, kBlock, 2 * kBlock}, 2, 1), (V{{4, 3, 2, 1}}));
  const double one_block_mb = double(kBlock * sizeof(float)) / (1024 * 1024);
  EXPECT_EQ(block_buckets(std::vector<size_t>(4, kBlock), 2, 1, one_block_mb),
            (V{{4}, {3}, {2}, {1}}));
  // --bucket-mb of two blocks still caps the split below a quarter's round-up.
  EXPECT_EQ(block_buckets(std::vector<size_t>(12, kBlock), 2, 2, 2 * one_block_mb).size(), 6u);
}

}  // namespace
}  // namespace mt
