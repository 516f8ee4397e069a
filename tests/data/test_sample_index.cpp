// The shuffled sample order (data/sample_index.h) and the loader drawing through it.
#include "data/sample_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "data/data_loader.h"
#include "test_util/temp_dir.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

std::vector<uint64_t> epoch_of(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<uint64_t> p(static_cast<size_t>(n));
  shuffled_epoch(seed, epoch, n, p.data());
  return p;
}

TEST(SampleIndex, EachEpochIsAPermutationThatDependsOnSeedAndEpoch) {
  const std::vector<uint64_t> a = epoch_of(1337, 0, 1000);
  std::vector<uint64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(a, iota);
  EXPECT_EQ(epoch_of(1337, 0, 1000), a);  // a pure function
  EXPECT_NE(epoch_of(1337, 1, 1000), a);  // another epoch, another order
  EXPECT_NE(epoch_of(1338, 0, 1000), a);  // another seed
}

TEST(SampleIndex, BuiltOnceAndReadBackFromItsFile) {
  TempDir tmp;
  SampleIndex idx(5, 300, tmp / "idx");
  const std::vector<uint64_t> e0 = epoch_of(5, 0, 300), e1 = epoch_of(5, 1, 300);
  for (int64_t g = 0; g < 600; ++g)
    EXPECT_EQ(uint64_t(idx.sample(g)), g < 300 ? e0[size_t(g)] : e1[size_t(g - 300)]);
  EXPECT_TRUE(fs::is_regular_file(idx.epoch_path(0)));
  EXPECT_TRUE(fs::is_regular_file(idx.epoch_path(1)));
  EXPECT_EQ(fs::file_size(idx.epoch_path(0)), 64u + 300u * 8u);
  // A second reader maps the same file: it is not rewritten.
  const auto written = fs::last_write_time(idx.epoch_path(0));
  SampleIndex again(5, 300, tmp / "idx");
  EXPECT_EQ(uint64_t(again.sample(7)), e0[7]);
  EXPECT_EQ(fs::last_write_time(idx.epoch_path(0)), written);
}

// A damaged or stale file is never used: the entries are checksummed and the header names
// (seed, epoch, n).
TEST(SampleIndex, DamagedOrStaleFileIsRebuiltNotUsed) {
  TempDir tmp;
  const std::string path = SampleIndex(9, 50, tmp / "i").epoch_path(0);
  { SampleIndex(9, 50, tmp / "i").sample(0); }
  const std::vector<uint64_t> want = epoch_of(9, 0, 50);
  // Swap two entries: still a permutation, but not this one; the checksum tells.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t e[2];
    f.seekg(64);
    f.read(reinterpret_cast<char*>(e), sizeof e);
    std::swap(e[0], e[1]);
    f.seekp(64);
    f.write(reinterpret_cast<const char*>(e), sizeof e);
  }
  SampleIndex damaged(9, 50, tmp / "i");
  for (int64_t g = 0; g < 50; ++g) EXPECT_EQ(uint64_t(damaged.sample(g)), want[size_t(g)]);
  // Another index's file under this name (a stale copy, another seed) is rebuilt too.
  { SampleIndex(10, 50, tmp / "other").sample(0); }
  fs::copy_file(SampleIndex(10, 50, tmp / "other").epoch_path(0), path,
                fs::copy_options::overwrite_existing);
  SampleIndex stale(9, 50, tmp / "i");
  for (int64_t g = 0; g < 50; ++g) EXPECT_EQ(uint64_t(stale.sample(g)), want[size_t(g)]);
  // Truncated.
  fs::resize_file(path, 100);
  SampleIndex truncated(9, 50, tmp / "i");
  EXPECT_EQ(uint64_t(truncated.sample(49)), want[49]);
}

// A shard whose token i has value i % 60000: a sequence's first input names its sample.
std::string iota_shard(const TempDir& tmp, int ntok) {
  std::vector<int> tokens(static_cast<size_t>(ntok));
  for (int i = 0; i < ntok; ++i) tokens[size_t(i)] = i % 60000;
  const std::string path = tmp / "iota.bin";
  write_token_shard(path, tokens);
  return path;
}

// Global batch k's sequences, in order, as this layout's ranks hold them.
std::vector<std::vector<int>> global_batches(const std::string& shard, const std::string& dir,
                                             int B, int T, int dp, int M, int batches,
                                             int64_t resume_after = -1) {
  std::vector<DataLoader> ranks;
  for (int d = 0; d < dp; ++d) {
    ranks.emplace_back(shard, B, T, dp, d, M);
    ranks.back().shuffle_samples(42, dir);
  }
  std::vector<std::vector<int>> out;
  for (int k = 0; k < batches; ++k) {
    std::vector<int> batch;
    uint64_t hash = 0;
    for (DataLoader& l : ranks) {
      if (k == resume_after) {  // a restart: a fresh loader at the saved position
        const int64_t at = l.position();
        l = DataLoader(shard, B, T, dp, int(&l - ranks.data()), M);
        l.shuffle_samples(42, dir);
        l.set_position(at);
      }
      l.next_batch();
      for (int j = 0; j < M; ++j)
        batch.insert(batch.end(), l.inputs(j), l.inputs(j) + l.micro_batch_size() * T);
      if (&l != ranks.data()) {
        EXPECT_EQ(l.batch_hash(), hash) << "ranks disagree on batch " << k;
      }
      hash = l.batch_hash();
    }
    batch.push_back(int(hash & 0x7fffffff));
    out.push_back(batch);
  }
  return out;
}

TEST(DataLoader, ShuffledOrderIsTheSameInEveryLayoutAndAfterAResume) {
  TempDir tmp;
  const int T = 4, B = 8;
  const std::string shard = iota_shard(tmp, 4 * 37 + 1);  // 37 samples: epochs end mid-batch
  const int batches = 12;                                 // about 2.6 epochs
  const auto one = global_batches(shard, tmp / "idx", B, T, 1, 1, batches);
  EXPECT_EQ(global_batches(shard, tmp / "idx", B, T, 2, 2, batches), one);
  EXPECT_EQ(global_batches(shard, tmp / "idx", B, T, 4, 1, batches), one);
  EXPECT_EQ(global_batches(shard, tmp / "idx", B, T, 1, 8, batches), one);
  EXPECT_EQ(global_batches(shard, tmp / "idx", B, T, 2, 1, batches, 5), one);
  // Each epoch draws every sample once, in an order that is not the sequential one.
  std::vector<int> firsts;
  for (const auto& b : one)
    for (int s = 0; s < B; ++s) firsts.push_back(b[size_t(s * T)] / T);
  std::set<int> epoch0(firsts.begin(), firsts.begin() + 37);
  EXPECT_EQ(epoch0.size(), 37u);
  std::vector<int> sequential(37);
  std::iota(sequential.begin(), sequential.end(), 0);
  EXPECT_NE(std::vector<int>(firsts.begin(), firsts.begin() + 37), sequential);
  // A sequence is a window of T+1 tokens at stride T: inputs k*T .. k*T+T-1.
  for (int s = 0; s < B; ++s)
    for (int t = 0; t < T; ++t) EXPECT_EQ(one[0][size_t(s * T + t)] % T, t);
}

}  // namespace
}  // namespace mt
