// FlatLayout: padding, buckets in backward order, and shard ownership (each element of
// every tensor updated by exactly one rank, shards equal however uneven the units are).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/data_parallel/data_parallel.h"
#include "parallel/data_parallel/flat_layout.h"

namespace mt {
namespace {

// The worked example of flat_layout.h: units of 100, 300 and 300 floats.
ParamTable example_table() {
  ParamTable t;
  t.add("edge", {100}, InitKind::zeros);     // [0, 112) with alignment
  t.add("b0.w", {10, 30}, InitKind::zeros);  // [112, 412) -> unit [112, 416)
  t.add("b1.w", {10, 30}, InitKind::zeros);  // [416, 716) -> unit [416, 720)
  return t;
}

std::vector<std::pair<size_t, size_t>> units_of(const ParamTable& t) {
  std::vector<std::pair<size_t, size_t>> u;
  for (const auto& p : t.entries()) u.push_back({p.offset, p.offset + (p.numel + 15) / 16 * 16});
  return u;
}

TEST(FlatLayout, WorkedExample) {
  ParamTable t = example_table();
  FlatLayout l(t, units_of(t), /*dp=*/2, /*rank=*/1, /*bucket=*/1, /*one_unit=*/true);
  ASSERT_EQ(l.buckets().size(), 3u);
  EXPECT_EQ(l.units()[0].padded, 128u);
  EXPECT_EQ(l.units()[1].flat, 128u);
  EXPECT_EQ(l.units()[1].padded, 320u);
  EXPECT_EQ(l.buckets()[0].units, std::vector<int>{2});  // last block first
  EXPECT_EQ(l.buckets()[2].units, std::vector<int>{0});  // edge unit last
  EXPECT_EQ(l.buckets()[0].owned_lo(1), 448u + 160u);
  EXPECT_EQ(l.buckets()[2].shard_off, 320u);
  EXPECT_EQ(l.shard_size(), 384u);
}

TEST(FlatLayout, BucketsGroupBlocksButNeverTheEdgeUnit) {
  ParamTable t = example_table();
  FlatLayout l(t, units_of(t), 2, 0, /*bucket=*/10000, false);
  ASSERT_EQ(l.buckets().size(), 2u);
  EXPECT_EQ(l.buckets()[0].units, (std::vector<int>{2, 1}));
  EXPECT_EQ(l.buckets()[0].flat_lo, 128u);
  EXPECT_EQ(l.buckets()[0].flat_hi, 768u);
}

// Blocks of 300 floats (unit 320 at dp 2) after an edge unit of 100.
ParamTable blocks_table(int blocks) {
  ParamTable t;
  t.add("edge", {100}, InitKind::zeros);
  for (int b = 0; b < blocks; ++b) {
    std::string name = std::to_string(b);  // "b<N>.w", appended (GCC 12's -Wrestrict on +)
    name.insert(0, 1, 'b').append(".w");
    t.add(name, {10, 30}, InitKind::zeros);
  }
  return t;
}

// The block-bucket rule (kBlockBuckets, ZeRO 0-2 without ep): a model smaller than the
// bucket size still gets its blocks in four buckets, so only the first block's reduction is
// left after the backward; --bucket-mb still caps them. Without the rule (min_block_buckets
// 1: ZeRO 1-2 under expert parallelism) one bucket holds every block.
TEST(FlatLayout, ASmallModelsBlocksTakeFourBucketsSoTheReductionOverlapsBackward) {
  const size_t mib25 = size_t(25) << 18;  // floats
  const int four = FlatLayout::kBlockBuckets;
  ParamTable t = blocks_table(4);
  FlatLayout l(t, units_of(t), 2, 0, mib25, false, {}, four);
  ASSERT_EQ(l.buckets().size(), 5u);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(l.buckets()[size_t(k)].units, std::vector<int>{4 - k});
  EXPECT_EQ(l.buckets()[4].units, std::vector<int>{0});
  ParamTable t12 = blocks_table(12);
  FlatLayout l12(t12, units_of(t12), 2, 0, mib25, false, {}, four);
  ASSERT_EQ(l12.buckets().size(), 5u);
  EXPECT_EQ(l12.buckets()[3].units, (std::vector<int>{3, 2, 1}));  // the exposed tail: 1/4
  FlatLayout capped(t12, units_of(t12), 2, 0, /*bucket=*/640, false, {}, four);
  EXPECT_EQ(capped.buckets().size(), 7u);  // pairs: --bucket-mb is smaller than a quarter
  FlatLayout one(t, units_of(t), 2, 0, mib25, false);
  ASSERT_EQ(one.buckets().size(), 2u);  // ZeRO 1-2 under ep: every block in one bucket
  EXPECT_EQ(one.buckets()[0].units, (std::vector<int>{4, 3, 2, 1}));
}

// What the engine asks for (DataParallel::flat_layout): four block buckets at ZeRO 0-2, one
// unit per bucket at ZeRO 3, and at ZeRO 1-2 under expert parallelism buckets of whole
// blocks per rank (two of two blocks at dp 2: test_data_parallel_ep_buckets.cpp).
TEST(FlatLayout, TheEngineSplitsBlocksAtZero0To2) {
  const size_t n = 16 * 30;  // block units of dp*16-aligned sizes: no padding
  std::vector<std::pair<size_t, size_t>> units;
  for (size_t u = 0; u < 5; ++u) units.push_back({u * n, (u + 1) * n});
  const ParamTable no_tensors;
  for (int zero : {0, 1, 2, 3})
    for (bool ep : {false, true}) {
      const FlatLayout l =
          DataParallel::flat_layout(no_tensors, units, {5}, 2, 0, zero, 25, /*experts_apart=*/ep);
      const size_t want = zero == 3 || zero == 0 || !ep ? 5u : 3u;
      EXPECT_EQ(l.buckets().size(), want) << "zero " << zero << " ep " << ep;
    }
}

// Two chunks (an interleaved stage): buckets follow each chunk's own backward order and
// never hold units of both, whatever the bucket size; an empty edge unit (a middle chunk)
// still gets its own bucket.
TEST(FlatLayout, BucketsNeverSpanChunks) {
  ParamTable t;
  t.add("c0.edge", {100}, InitKind::zeros);
  t.add("c0.b0", {10, 30}, InitKind::zeros);
  t.add("c1.b0", {10, 30}, InitKind::zeros);
  t.add("c1.b1", {10, 30}, InitKind::zeros);
  std::vector<std::pair<size_t, size_t>> units = units_of(t);
  // Chunk 1 holds no edge tensors: its unit 0 is empty, where its blocks begin.
  const size_t c1 = t.at("c1.b0").offset;
  units.insert(units.begin() + 2, {c1, c1});
  FlatLayout l(t, units, 2, 0, /*bucket=*/1 << 20, false, /*units_per_chunk=*/{2, 3});
  ASSERT_EQ(l.buckets().size(), 4u);
  EXPECT_EQ(l.buckets()[0].units, std::vector<int>{1});
  EXPECT_EQ(l.buckets()[1].units, std::vector<int>{0});
  EXPECT_EQ(l.buckets()[2].units, (std::vector<int>{4, 3}));
  EXPECT_EQ(l.buckets()[3].units, std::vector<int>{2});
  EXPECT_EQ(l.buckets()[3].size(), 0u);
  size_t covered = 0;
  for (const FlatPiece& p : l.pieces(false)) covered += p.n;
  EXPECT_EQ(covered, 100u + 3 * 300u);
}

// Every real element is owned by exactly one rank, at distinct shard positions.
TEST(FlatLayout, OwnedPiecesPartitionEveryTensor) {
  for (int dp : {1, 2, 3, 4, 7}) {
    for (bool one : {true, false}) {
      ParamTable t;
      t.add("wte", {37, 5}, InitKind::zeros);
      t.add("h.0.a", {13}, InitKind::zeros);
      t.add("h.0.b", {3, 41}, InitKind::zeros);
      t.add("h.1.a", {99}, InitKind::zeros);
      std::vector<std::pair<size_t, size_t>> units = {{0, t.at("h.0.a").offset},
                                                      {t.at("h.0.a").offset, t.at("h.1.a").offset},
                                                      {t.at("h.1.a").offset, t.total()}};
      std::vector<int> owners(t.total(), 0);
      size_t shard = 0;
      for (int r = 0; r < dp; ++r) {
        FlatLayout l(t, units, dp, r, /*bucket=*/64, one);
        if (r == 0) shard = l.shard_size();
        EXPECT_EQ(l.shard_size(), shard) << "shards must be equal";
        EXPECT_EQ(l.flat_size() % (size_t(dp) * 16), 0u);
        std::vector<bool> used(l.shard_size(), false);
        for (const FlatPiece& p : l.pieces(true))
          for (size_t i = 0; i < p.n; ++i) {
            ++owners[p.table_off + i];
            ASSERT_LT(p.shard_off + i, used.size());
            EXPECT_FALSE(used[p.shard_off + i]);
            used[p.shard_off + i] = true;
          }
      }
      for (const auto& p : t.entries())
        for (size_t i = 0; i < p.numel; ++i)
          EXPECT_EQ(owners[p.offset + i], 1) << p.name << "[" << i << "] dp " << dp;
    }
  }
}

}  // namespace
}  // namespace mt
