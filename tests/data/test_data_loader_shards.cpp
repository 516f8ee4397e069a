// A dataset's split is several shards read as one stream (data/shard_writer.h).
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "data/data_loader.h"
#include "test_util/temp_dir.h"

namespace mt {
namespace {

using test_util::TempDir;

TEST(DataLoader, ReadsSeveralShardsAsOneStream) {
  TempDir tmp;
  std::vector<int> all(1000);
  std::iota(all.begin(), all.end(), 0);
  write_token_shard(tmp / "whole.bin", all);
  // Uneven pieces, one shorter than a sequence, so sequences straddle shard boundaries.
  std::vector<std::string> parts;
  const int cuts[] = {0, 333, 340, 731, 1000};
  for (int k = 0; k + 1 < int(std::size(cuts)); ++k) {
    parts.push_back(tmp / ("part" + std::to_string(k) + ".bin"));
    write_token_shard(parts.back(),
                      std::span<const int>(all.data() + cuts[k], size_t(cuts[k + 1] - cuts[k])));
  }
  for (int dp_rank = 0; dp_rank < 2; ++dp_rank) {
    DataLoader whole(tmp / "whole.bin", 8, 24, 2, dp_rank, 2);
    DataLoader split(parts, 8, 24, 2, dp_rank, 2);
    EXPECT_EQ(split.batches_per_epoch(), whole.batches_per_epoch());
    EXPECT_EQ(split.max_token_id(), 999);
    for (int batch = 0; batch < 12; ++batch) {  // past the end: the position returns to 0
      whole.next_batch();
      split.next_batch();
      for (int j = 0; j < 2; ++j)
        for (int i = 0; i < 2 * 24; ++i) {
          ASSERT_EQ(split.inputs(j)[i], whole.inputs(j)[i]) << batch << " " << j << " " << i;
          ASSERT_EQ(split.targets(j)[i], whole.targets(j)[i]) << batch << " " << j << " " << i;
        }
    }
    EXPECT_EQ(split.position(), whole.position());
  }
  EXPECT_THROW(DataLoader(parts, 8, 24).require_vocab(999), UsageError);
  // One stream may mix the versions (a dataset is one version, but --data files need not
  // be): a version-2 copy of one piece reads the same.
  std::vector<std::string> mixed = parts;
  mixed[2] = tmp / "part2_v2.bin";
  write_token_shard(mixed[2], std::span<const int>(all.data() + 340, 391), kTokenShardVersion32);
  DataLoader split(parts, 8, 24), mix(mixed, 8, 24);
  for (int batch = 0; batch < 6; ++batch) {
    split.next_batch();
    mix.next_batch();
    for (int i = 0; i < 8 * 24; ++i) ASSERT_EQ(mix.inputs(0)[i], split.inputs(0)[i]) << batch;
  }
  EXPECT_THROW(DataLoader(parts, 8, 200), UsageError);  // 1000 tokens < 8 * 200 + 1
}

}  // namespace
}  // namespace mt
