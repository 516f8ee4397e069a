#include "data/token_shard.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include "test_util/temp_dir.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "test_util/usage_error.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

// Writes a shard by hand (not through write_token_shard) so bad headers can be made:
// actual_tokens tokens of token_bytes bytes each (2: uint16, 4: uint32), all 7.
void write_raw(const std::string& path, int32_t magic, int32_t version, int32_t ntok,
               size_t actual_tokens, size_t token_bytes = 2) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = ntok;
  std::vector<unsigned char> tokens(actual_tokens * token_bytes, 0);
  for (size_t i = 0; i < actual_tokens; ++i) tokens[i * token_bytes] = 7;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), long(tokens.size()));
}

std::vector<unsigned char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

uint32_t le32(const std::vector<unsigned char>& bytes, size_t at) {
  return uint32_t(bytes[at]) | uint32_t(bytes[at + 1]) << 8 | uint32_t(bytes[at + 2]) << 16 |
         uint32_t(bytes[at + 3]) << 24;
}

std::string refusal_of_shard(const std::string& path) {
  return test_util::refusal_of([&] { read_token_shard(path); }, path);
}

TEST(TokenShard, WritesTheLlmcLayoutByteForByte) {
  TempDir tmp;
  std::vector<int> tokens = {0, 1, 255, 256, 65535};
  write_token_shard(tmp / "a.bin", tokens);
  ASSERT_EQ(fs::file_size(tmp / "a.bin"), 1024u + 2 * tokens.size());
  const std::vector<unsigned char> bytes = file_bytes(tmp / "a.bin");
  EXPECT_EQ(le32(bytes, 0), 20240520u);
  EXPECT_EQ(le32(bytes, 4), 1u) << "ids that fit uint16 are written as version 1";
  EXPECT_EQ(le32(bytes, 8), 5u);
  for (size_t i = 12; i < 1024; ++i) EXPECT_EQ(bytes[i], 0) << i;
  // 256 = 0x0100 little-endian, 65535 = 0xffff.
  EXPECT_EQ(bytes[1024 + 6], 0x00);
  EXPECT_EQ(bytes[1024 + 7], 0x01);
  EXPECT_EQ(bytes[1024 + 8], 0xff);
  EXPECT_EQ(bytes[1024 + 9], 0xff);
}

// Version 2 (docs/contracts.md §10): the same header with [1] = 2, then little-endian uint32.
TEST(TokenShard, WritesVersion2ByteForByte) {
  TempDir tmp;
  const std::vector<int> tokens = {0, 65536, 128255, 2147483646};
  write_token_shard(tmp / "a.bin", tokens);
  ASSERT_EQ(fs::file_size(tmp / "a.bin"), 1024u + 4 * tokens.size());
  const std::vector<unsigned char> bytes = file_bytes(tmp / "a.bin");
  EXPECT_EQ(le32(bytes, 0), 20240520u);
  EXPECT_EQ(le32(bytes, 4), 2u) << "an id above 65535 needs version 2";
  EXPECT_EQ(le32(bytes, 8), 4u);
  for (size_t i = 12; i < 1024; ++i) EXPECT_EQ(bytes[i], 0) << i;
  for (size_t i = 0; i < tokens.size(); ++i)
    EXPECT_EQ(le32(bytes, 1024 + 4 * i), uint32_t(tokens[i])) << i;
}

TEST(TokenShard, VersionFollowsTheVocabulary) {
  EXPECT_EQ(token_shard_version_for_vocab(256), 1);
  EXPECT_EQ(token_shard_version_for_vocab(65536), 1);  // ids 0..65535 fit uint16
  EXPECT_EQ(token_shard_version_for_vocab(65537), 2);
  EXPECT_EQ(token_shard_version_for_vocab(2147483647), 2);
  TempDir tmp;
  // A large vocabulary's shard may hold only small ids: the caller's version is kept.
  write_token_shard(tmp / "a.bin", std::vector<int>{1, 2, 3}, kTokenShardVersion32);
  EXPECT_EQ(fs::file_size(tmp / "a.bin"), 1024u + 12);
  EXPECT_EQ(TokenShard(tmp / "a.bin").version(), 2);
}

TEST(TokenShard, RoundTripsAndReportsMaxId) {
  TempDir tmp;
  std::vector<uint16_t> tokens = {5, 300, 2, 50256};
  write_token_shard(tmp / "a.bin", std::span<const uint16_t>(tokens));
  EXPECT_EQ(read_token_shard(tmp / "a.bin"), std::vector<uint32_t>(tokens.begin(), tokens.end()));
  EXPECT_EQ(read_token_shard_header(tmp / "a.bin"), 4);
  TokenShard shard(tmp / "a.bin");
  EXPECT_EQ(shard.size(), 4);
  EXPECT_EQ(shard.version(), 1);
  EXPECT_EQ(shard.max_token_id(), 50256);
  EXPECT_EQ(shard.first_token_at_least(300), 1);
  EXPECT_EQ(shard.first_token_at_least(50257), -1);
}

TEST(TokenShard, Version2RoundTripsThroughTheMap) {
  TempDir tmp;
  const std::vector<int> tokens = {7, 128255, 3, 70000, 65536, 0};
  write_token_shard(tmp / "a.bin", tokens);
  EXPECT_EQ(read_token_shard(tmp / "a.bin"), std::vector<uint32_t>(tokens.begin(), tokens.end()));
  EXPECT_EQ(read_token_shard_header(tmp / "a.bin"), 6);
  TokenShard shard(tmp / "a.bin");
  EXPECT_EQ(shard.version(), 2);
  EXPECT_EQ(shard.max_token_id(), 128255);
  EXPECT_EQ(shard.first_token_at_least(65536), 1);
  EXPECT_EQ(shard.first_token_at_least(100000), 1);
  EXPECT_EQ(shard.first_token_at_least(128256), -1);
  std::vector<int32_t> run(4);
  shard.copy(1, 4, run.data());
  EXPECT_EQ(run, (std::vector<int32_t>{128255, 3, 70000, 65536}));
}

// An id of 2^31 or more fits uint32 but no vocabulary: the scan reports it as it is.
TEST(TokenShard, Version2IdsBeyondInt32AreReportedExactly) {
  TempDir tmp;
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 2, header[2] = 2;
  const uint32_t tokens[2] = {5, 4000000000u};
  {
    std::ofstream out(tmp / "big.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(tokens), sizeof tokens);
  }
  TokenShard shard(tmp / "big.bin");
  EXPECT_EQ(shard.max_token_id(), 4000000000);
  EXPECT_EQ(shard.first_token_at_least(2147483647), 1);
}

TEST(TokenShard, EmptyShardIsValid) {
  TempDir tmp;
  write_token_shard(tmp / "e.bin", std::vector<int>{});
  EXPECT_EQ(fs::file_size(tmp / "e.bin"), 1024u);
  EXPECT_TRUE(read_token_shard(tmp / "e.bin").empty());
  EXPECT_EQ(TokenShard(tmp / "e.bin").max_token_id(), -1);
}

TEST(TokenShard, RejectsIdsThatDoNotFitUint16) {
  TempDir tmp;
  try {
    write_token_shard(tmp / "a.bin", std::vector<int>{1, 65536}, kTokenShardVersion16);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 65536 (at index 1)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(write_token_shard(tmp / "a.bin", std::vector<int>{-1}), UsageError);
  EXPECT_FALSE(fs::exists(tmp / "a.bin"));
}

TEST(TokenShard, MissingFile) {
  TempDir tmp;
  EXPECT_EQ(refusal_of_shard(tmp / "nope.bin"),
            "data file " + (tmp / "nope.bin") + " does not exist");
}

TEST(TokenShard, TooSmallForHeader) {
  TempDir tmp;
  std::ofstream(tmp / "t.bin") << "hello";
  std::string msg = refusal_of_shard(tmp / "t.bin");
  EXPECT_NE(msg.find("is 5 bytes, too small for the 1024-byte token-shard header"),
            std::string::npos)
      << msg;
}

TEST(TokenShard, WrongMagicShowsFoundAndExpected) {
  TempDir tmp;
  write_raw(tmp / "m.bin", 20240521, 1, 3, 3);
  std::string msg = refusal_of_shard(tmp / "m.bin");
  EXPECT_NE(msg.find(tmp / "m.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic number is 20240521, expected 20240520"), std::string::npos) << msg;
}

TEST(TokenShard, UnsupportedVersion) {
  TempDir tmp;
  write_raw(tmp / "v.bin", 20240520, 3, 3, 3);
  std::string msg = refusal_of_shard(tmp / "v.bin");
  EXPECT_NE(msg.find("unsupported token-shard version 3"), std::string::npos) << msg;
}

// The size rule follows the version: 1024 + 4*ntok for version 2.
TEST(TokenShard, Version2SizeRule) {
  TempDir tmp;
  write_raw(tmp / "ok.bin", 20240520, 2, 3, 3, 4);
  EXPECT_EQ(read_token_shard(tmp / "ok.bin"), (std::vector<uint32_t>{7, 7, 7}));
  // A version-1 body under a version-2 header: half the bytes the header declares.
  write_raw(tmp / "v1body.bin", 20240520, 2, 10, 10, 2);
  std::string msg = refusal_of_shard(tmp / "v1body.bin");
  EXPECT_NE(msg.find("declares 10 uint32 tokens (expects 1064 bytes) but is 1044 bytes "
                     "(truncated?)"),
            std::string::npos)
      << msg;
  write_raw(tmp / "long.bin", 20240520, 2, 2, 3, 4);
  msg = refusal_of_shard(tmp / "long.bin");
  EXPECT_NE(msg.find("declares 2 uint32 tokens (expects 1032 bytes) but is 1036 bytes"),
            std::string::npos)
      << msg;
  write_raw(tmp / "neg.bin", 20240520, 2, -1, 0, 4);
  EXPECT_NE(refusal_of_shard(tmp / "neg.bin").find("negative token count"), std::string::npos);
}

TEST(TokenShard, TruncatedTokens) {
  TempDir tmp;
  write_raw(tmp / "s.bin", 20240520, 1, 10, 7);
  std::string msg = refusal_of_shard(tmp / "s.bin");
  EXPECT_NE(msg.find("declares 10 tokens (expects 1044 bytes) but is 1038 bytes (truncated?)"),
            std::string::npos)
      << msg;
  EXPECT_THROW(read_token_shard_header(tmp / "s.bin"), UsageError);
}

TEST(TokenShard, TrailingBytes) {
  TempDir tmp;
  write_raw(tmp / "s.bin", 20240520, 1, 2, 3);
  std::string msg = refusal_of_shard(tmp / "s.bin");
  EXPECT_NE(msg.find("declares 2 tokens (expects 1028 bytes) but is 1030 bytes"), std::string::npos)
      << msg;
}

TEST(TokenShard, NegativeCount) {
  TempDir tmp;
  write_raw(tmp / "n.bin", 20240520, 1, -4, 0);
  EXPECT_NE(refusal_of_shard(tmp / "n.bin").find("negative token count"), std::string::npos);
}

}  // namespace
}  // namespace mt
