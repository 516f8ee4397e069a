// Stage partitioning: balanced by the cost model, and the --stage-layers override.
#include "parallel/pipeline/stage_partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace mt {
namespace {

using V = std::vector<int>;

double max_cost(const V& counts, const PartitionCost& c) {
  double worst = 0;
  for (size_t k = 0; k < counts.size(); ++k)
    worst = std::max(worst, counts[k] * c.block + (k == 0 ? c.embedding : 0) +
                                (k + 1 == counts.size() ? c.head : 0));
  return worst;
}

TEST(StagePartition, EvenWhenTheHeadIsFree) {
  EXPECT_EQ(partition_layers(12, 4, {}), (V{3, 3, 3, 3}));
  EXPECT_EQ(partition_layers(14, 4, {}), (V{3, 3, 4, 4}));  // lighter early stages
  EXPECT_EQ(partition_layers(2, 4, {}), (V{0, 0, 1, 1}));
  EXPECT_EQ(partition_layers(0, 3, {}), (V{0, 0, 0}));
  EXPECT_EQ(partition_layers(5, 1, {}), (V{5}));
}

TEST(StagePartition, TheHeadCountsOnTheLastChunk) {
  PartitionCost c;
  c.head = 0.5;
  EXPECT_EQ(partition_layers(14, 4, c), (V{3, 4, 4, 3}));
  // GPT-2 small: the head costs ~4.5 blocks, so the last of 4 stages gets no block.
  const PartitionCost gpt2 = partition_cost_model(768, 1024, 50257);
  EXPECT_NEAR(gpt2.head, 50257.0 / (12 * 768 + 2 * 1024), 1e-12);
  EXPECT_EQ(partition_layers(12, 4, gpt2), (V{4, 4, 4, 0}));
  c.embedding = 1;
  c.head = 2;
  EXPECT_EQ(partition_layers(10, 4, c), (V{2, 3, 3, 2}));  // costs 3,3,3,4
}

TEST(StagePartition, IsOptimalAgainstBruteForce) {
  // Every split of up to 9 layers into 3 chunks: none has a cheaper bottleneck.
  const PartitionCost costs[] = {{1, 0, 0}, {1, 0, 0.7}, {1, 0.3, 2.2}, {1, 0, 5}};
  for (const PartitionCost& c : costs)
    for (int layers = 0; layers <= 9; ++layers) {
      const V got = partition_layers(layers, 3, c);
      ASSERT_EQ(std::accumulate(got.begin(), got.end(), 0), layers);
      double best = 1e9;
      for (int a = 0; a <= layers; ++a)
        for (int b = 0; a + b <= layers; ++b)
          best = std::min(best, max_cost(V{a, b, layers - a - b}, c));
      EXPECT_NEAR(max_cost(got, c), best, 1e-9) << "layers " << layers << " head " << c.head;
    }
}

TEST(StagePartition, OverrideIsParsedAndChecked) {
  EXPECT_EQ(parse_stage_layers("3,4,4,3", 14, 4), (V{3, 4, 4, 3}));
  EXPECT_EQ(parse_stage_layers("0,6", 6, 2), (V{0, 6}));
  auto fails_with = [](const std::string& spec, int layers, int chunks, const std::string& why) {
    try {
      parse_stage_layers(spec, layers, chunks);
      ADD_FAILURE() << spec << ": no error";
    } catch (const UsageError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("--stage-layers"), std::string::npos) << msg;
      EXPECT_NE(msg.find(why), std::string::npos) << msg;
    }
  };
  fails_with("3,4,4", 14, 4, "one per pipeline chunk");
  fails_with("3,4,4,4", 14, 4, "sums to 15");
  fails_with("3,-1,4,8", 14, 4, "-1");
  fails_with("3,a,4,3", 14, 4, "not an integer");
  fails_with("3,,4,3", 14, 4, "not an integer");
  fails_with("", 14, 1, "not an integer");
}

TEST(StagePartition, OffsetsAreCumulative) {
  EXPECT_EQ(chunk_layer_offsets({3, 4, 4, 3}), (V{0, 3, 7, 11, 14}));
}

}  // namespace
}  // namespace mt
