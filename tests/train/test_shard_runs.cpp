// map_local_range and RunBuilder (train/checkpoint/shard_runs.h) against the element-wise
// truth, ParamInfo::for_each_element, for every kind of shard spec and every sub-range.
#include <gtest/gtest.h>

#include <vector>

#include "model/param_table.h"
#include "train/checkpoint/shard_runs.h"

namespace mt {
namespace {

// global index of each local element (-1: padding), element by element.
std::vector<int64_t> truth(const ParamInfo& p) {
  std::vector<int64_t> g(p.numel, -1);
  p.for_each_element([&](size_t l, int64_t gi) { g[l] = gi; });
  return g;
}

void check_all_ranges(const ParamInfo& p) {
  const std::vector<int64_t> want = truth(p);
  for (size_t lo = 0; lo <= p.numel; lo += 3)
    for (size_t hi = lo; hi <= p.numel; hi += 5) {
      std::vector<int64_t> got(p.numel, -1);
      RunBuilder rb;
      size_t last_end = lo;
      map_local_range(p, lo, hi, [&](size_t l, int64_t g, int64_t n) {
        ASSERT_GE(l, last_end);
        last_end = l + size_t(n);
        for (int64_t i = 0; i < n; ++i) got[l + size_t(i)] = g + i;
        rb.add(g, n);
      });
      std::vector<int64_t> expect(p.numel, -1), from_runs;
      for (size_t i = lo; i < hi; ++i) expect[i] = want[i];
      ASSERT_EQ(got, expect) << p.name << " [" << lo << ", " << hi << ")";
      // The runs list the same global indices in the same order.
      for_each_interval(rb.runs(), [&](int64_t a, int64_t n) {
        for (int64_t i = 0; i < n; ++i) from_runs.push_back(a + i);
      });
      std::vector<int64_t> in_order;
      for (size_t i = lo; i < hi; ++i)
        if (want[i] >= 0) in_order.push_back(want[i]);
      ASSERT_EQ(from_runs, in_order) << p.name << " [" << lo << ", " << hi << ")";
    }
}

TEST(ShardRuns, MatchTheElementWiseMapping) {
  ParamTable t;
  check_all_ranges(t.add("replicated", {7, 5}, InitKind::zeros));
  // Column-parallel qkv: three blocks along dim 0.
  check_all_ranges(
      t.add("qkv", {12, 4}, InitKind::zeros, 0.02f, ShardSpec{0, {{2, 2}, {6, 2}, {10, 2}}}));
  // Row-parallel: one block along dim 1 (one stretch per row).
  check_all_ranges(t.add("row", {5, 8}, InitKind::zeros, 0.02f, ShardSpec{1, {{4, 4}}}));
  // A padded vocabulary: the last tp rank's block runs 3 rows past the global extent.
  check_all_ranges(t.add("wte", {10, 3}, InitKind::zeros, 0.02f, ShardSpec{0, {{6, 7}}}));
  // A 1-D bias split in two blocks.
  check_all_ranges(t.add("bias", {12}, InitKind::zeros, 0.02f, ShardSpec{0, {{0, 3}, {6, 3}}}));
}

TEST(ShardRuns, RowSlicesFoldIntoOneStridedRun) {
  ParamTable t;
  const ParamInfo& p = t.add("row", {64, 256}, InitKind::zeros, 0.02f, ShardSpec{1, {{128, 64}}});
  RunBuilder rb;
  map_local_range(p, 0, p.numel, [&](size_t, int64_t g, int64_t n) { rb.add(g, n); });
  ASSERT_EQ(rb.runs().size(), 1u);
  EXPECT_EQ(rb.runs()[0].start, 128);
  EXPECT_EQ(rb.runs()[0].len, 64);
  EXPECT_EQ(rb.runs()[0].count, 64);
  EXPECT_EQ(rb.runs()[0].stride, 256);
  EXPECT_EQ(rb.elements(), 64 * 64);
}

}  // namespace
}  // namespace mt
