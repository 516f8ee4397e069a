#include "data/data_loader.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include "test_util/temp_dir.h"

#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "test_util/usage_error.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

// A shard whose token i has value i: every expected batch below is then readable as
// token offsets.
std::string iota_shard(const TempDir& tmp, int ntok) {
  std::vector<int> tokens(ntok);
  std::iota(tokens.begin(), tokens.end(), 0);
  std::string path = tmp / ("iota" + std::to_string(ntok) + ".bin");
  write_token_shard(path, tokens);
  return path;
}

using Rows = std::vector<std::vector<int>>;

// Microbatch j of the last batch as rows of T ids.
Rows rows(const int32_t* p, int b, int T) {
  Rows r(b);
  for (int i = 0; i < b; ++i) r[i].assign(p + i * T, p + (i + 1) * T);
  return r;
}

TEST(DataLoader, SequentialOrderWithWraparound) {
  TempDir tmp;
  // ntok = 20, B = 2, T = 4: the worked example of data_loader.h and docs/data.md.
  DataLoader dl(iota_shard(tmp, 20), 2, 4);
  EXPECT_EQ(dl.batches_per_epoch(), 2);
  dl.next_batch();
  EXPECT_EQ(rows(dl.inputs(0), 2, 4), (Rows{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(rows(dl.targets(0), 2, 4), (Rows{{1, 2, 3, 4}, {5, 6, 7, 8}}));
  EXPECT_EQ(dl.position(), 8);
  dl.next_batch();
  EXPECT_EQ(rows(dl.inputs(0), 2, 4), (Rows{{8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(rows(dl.targets(0), 2, 4), (Rows{{9, 10, 11, 12}, {13, 14, 15, 16}}));
  EXPECT_EQ(dl.position(), 16);
  // Batch 2 would need tokens 16..24: back to token 0 first.
  dl.next_batch();
  EXPECT_EQ(rows(dl.inputs(0), 2, 4), (Rows{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(dl.position(), 8);
}

TEST(DataLoader, BatchEndingExactlyAtLastTokenIsRead) {
  TempDir tmp;
  DataLoader fits(iota_shard(tmp, 17), 2, 4);  // batch 1 reads tokens 8..16 of 0..16
  fits.next_batch();
  fits.next_batch();
  EXPECT_EQ(rows(fits.targets(0), 2, 4), (Rows{{9, 10, 11, 12}, {13, 14, 15, 16}}));
  DataLoader short_by_one(iota_shard(tmp, 16), 2, 4);  // batch 1 would need token 16
  EXPECT_EQ(short_by_one.batches_per_epoch(), 1);
  short_by_one.next_batch();
  short_by_one.next_batch();
  EXPECT_EQ(rows(short_by_one.inputs(0), 2, 4), (Rows{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(DataLoader, DataParallelRankAndMicrobatchSlices) {
  TempDir tmp;
  std::string path = iota_shard(tmp, 60);
  // B = 8, T = 3, dp = 2, M = 2: each microbatch has b = 2 sequences. Rank 1 owns
  // sequences 4..7; its microbatch 0 is sequences 4, 5 and microbatch 1 is 6, 7.
  DataLoader dl(path, 8, 3, 2, 1, 2);
  EXPECT_EQ(dl.micro_batch_size(), 2);
  dl.next_batch();
  EXPECT_EQ(rows(dl.inputs(0), 2, 3), (Rows{{12, 13, 14}, {15, 16, 17}}));
  EXPECT_EQ(rows(dl.inputs(1), 2, 3), (Rows{{18, 19, 20}, {21, 22, 23}}));
  EXPECT_EQ(rows(dl.targets(1), 2, 3), (Rows{{19, 20, 21}, {22, 23, 24}}));
  // Batch 1 starts at 24: rank 1, microbatch 0 = sequences 4, 5 from there.
  dl.next_batch();
  EXPECT_EQ(rows(dl.inputs(0), 2, 3), (Rows{{36, 37, 38}, {39, 40, 41}}));
  // Batch 2 would need 48..72 of 60 tokens: wraps, same as batch 0.
  dl.next_batch();
  EXPECT_EQ(rows(dl.inputs(0), 2, 3), (Rows{{12, 13, 14}, {15, 16, 17}}));

  DataLoader rank0(path, 8, 3, 2, 0, 2);
  rank0.next_batch();
  EXPECT_EQ(rows(rank0.inputs(0), 2, 3), (Rows{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(rows(rank0.targets(1), 2, 3), (Rows{{7, 8, 9}, {10, 11, 12}}));
}

// Every (dp, microbatches) layout, concatenated over ranks and microbatches, sees exactly
// the single-worker batch, through several wraparounds.
TEST(DataLoader, AllLayoutsSeeTheSameTokens) {
  TempDir tmp;
  std::vector<int> tokens(203);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int>((i * 7919 + 13) % 65536);
  std::string path = tmp / "r.bin";
  write_token_shard(path, tokens);
  const int B = 8, T = 5;
  DataLoader ref(path, B, T);
  std::vector<std::unique_ptr<DataLoader>> layouts;
  std::vector<std::pair<int, int>> shapes;  // (dp, M)
  for (int dp : {1, 2, 4, 8})
    for (int M : {1, 2, 4})
      if (B % (dp * M) == 0) {
        for (int d = 0; d < dp; ++d)
          layouts.push_back(std::make_unique<DataLoader>(path, B, T, dp, d, M));
        shapes.push_back({dp, M});
      }
  for (int step = 0; step < 13; ++step) {  // 203 tokens hold 5 batches: wraps twice
    ref.next_batch();
    std::vector<int> want_in(ref.inputs(0), ref.inputs(0) + B * T);
    std::vector<int> want_tg(ref.targets(0), ref.targets(0) + B * T);
    size_t at = 0;
    for (auto [dp, M] : shapes) {
      std::vector<int> got_in, got_tg;
      for (int d = 0; d < dp; ++d) {
        DataLoader& dl = *layouts[at++];
        dl.next_batch();
        for (int j = 0; j < M; ++j) {
          int n = dl.micro_batch_size() * T;
          got_in.insert(got_in.end(), dl.inputs(j), dl.inputs(j) + n);
          got_tg.insert(got_tg.end(), dl.targets(j), dl.targets(j) + n);
        }
      }
      EXPECT_EQ(got_in, want_in) << "dp " << dp << " M " << M << " step " << step;
      EXPECT_EQ(got_tg, want_tg) << "dp " << dp << " M " << M << " step " << step;
    }
  }
}

TEST(DataLoader, ResumeFromPosition) {
  TempDir tmp;
  std::string path = iota_shard(tmp, 100);
  DataLoader a(path, 3, 7);
  for (int i = 0; i < 3; ++i) a.next_batch();
  int64_t saved = a.position();
  EXPECT_EQ(saved, 63);  // batches at 0, 21, 42; 63 still fits, the one at 84 wraps
  DataLoader b(path, 3, 7);
  b.set_position(saved);
  for (int i = 0; i < 4; ++i) {
    a.next_batch();
    b.next_batch();
    EXPECT_EQ(rows(a.inputs(0), 3, 7), rows(b.inputs(0), 3, 7));
  }
  DataLoader moved = std::move(b);  // loaders can live in containers and optionals
  moved.reset();
  moved.next_batch();
  EXPECT_EQ(moved.inputs(0)[0], 0);
  EXPECT_EQ(moved.position(), 21);
  EXPECT_THROW(moved.set_position(101), UsageError);
  EXPECT_THROW(moved.set_position(-1), UsageError);
}

using test_util::refusal_of;

TEST(DataLoader, RejectsBadLayoutsAndShortShards) {
  TempDir tmp;
  std::string path = iota_shard(tmp, 100);
  EXPECT_EQ(refusal_of([&] { DataLoader(path, 6, 4, 2, 0, 2); }),
            "batch 6 must be divisible by dp * microbatches = 2 * 2 = 4");
  std::string msg = refusal_of([&] { DataLoader(path, 9, 12); });
  EXPECT_NE(
      msg.find("holds 100 tokens, fewer than one batch needs (batch * seq + 1 = 9 * 12 + 1 = 109)"),
      std::string::npos)
      << msg;
  EXPECT_NO_THROW(
      DataLoader(path, 9, 11, 1, 0, 1).batches_per_epoch());  // 9 * 11 + 1 = 100 fits exactly
  EXPECT_THROW(DataLoader(path, 0, 4), UsageError);
  EXPECT_THROW(DataLoader(tmp / "missing.bin", 1, 4), UsageError);
}

// The first id outside the vocabulary is named, with its place: not the largest one.
TEST(DataLoader, VocabCheckNamesFileAndFirstBadId) {
  TempDir tmp;
  std::string path = tmp / "v.bin";
  write_token_shard(path, std::vector<int>{1, 2, 300, 4, 500, 5});
  DataLoader dl(path, 1, 2);
  EXPECT_EQ(dl.max_token_id(), 500);
  EXPECT_EQ(refusal_of([&] { dl.require_vocab(256); }),
            "data file " + path +
                " holds token id 300 (its token 2, the first id outside the vocabulary) but the "
                "model vocab is 256 (ids 0..255)");
  EXPECT_NE(refusal_of([&] { dl.require_vocab(400); }).find("token id 500 (its token 4,"),
            std::string::npos);
  EXPECT_NO_THROW(dl.require_vocab(501));
  EXPECT_THROW(require_shard_vocab(path, 300), UsageError);
  EXPECT_NO_THROW(require_shard_vocab(path, 50257));
}

// Version-2 shards feed the same int32 batches, ids above 65535 included.
TEST(DataLoader, ReadsVersion2Shards) {
  TempDir tmp;
  const int V = 128256;
  std::vector<int> tokens(41);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * 104729 + 65536) % V);
  const std::string path = tmp / "v2.bin";
  write_token_shard(path, tokens);
  ASSERT_EQ(TokenShard(path).version(), 2);
  DataLoader dl(path, 2, 4);
  dl.require_vocab(V);
  EXPECT_THROW(dl.require_vocab(65536), UsageError);
  for (int batch = 0; batch < 3; ++batch) {
    const int64_t pos = dl.position() + 2 * 4 + 1 > 41 ? 0 : dl.position();
    dl.next_batch();
    for (int i = 0; i < 2 * 4; ++i) {
      EXPECT_EQ(dl.inputs(0)[i], tokens[size_t(pos + i)]) << batch << " " << i;
      EXPECT_EQ(dl.targets(0)[i], tokens[size_t(pos + i + 1)]) << batch << " " << i;
    }
  }
}

TEST(DataLoader, VocabularyOfShards) {
  TempDir tmp;
  write_token_shard(tmp / "a.bin", std::vector<int>{1, 2, 3});
  write_token_shard(tmp / "b.bin", std::vector<int>{7, 100000});
  EXPECT_EQ(vocab_of_shards({tmp / "a.bin"}), 256);  // byte-level at least
  EXPECT_EQ(vocab_of_shards({tmp / "a.bin", tmp / "b.bin"}), 100001);
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 2, header[2] = 1;
  const uint32_t beyond = 2147483647u;  // id 2^31-1 needs a vocabulary of 2^31
  {
    std::ofstream out(tmp / "c.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(&beyond), 4);
  }
  EXPECT_NE(refusal_of([&] {
              vocab_of_shards({tmp / "a.bin", tmp / "c.bin"});
            }).find("c.bin holds token id 2147483647, beyond the largest vocabulary"),
            std::string::npos);
}

}  // namespace
}  // namespace mt
