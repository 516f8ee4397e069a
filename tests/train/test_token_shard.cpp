#include "train/token_shard.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include "test_util/temp_dir.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

// Writes a shard by hand (not through write_token_shard) so bad headers can be made.
void write_raw(const std::string& path, int32_t magic, int32_t version, int32_t ntok,
               size_t actual_tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = ntok;
  std::vector<uint16_t> tokens(actual_tokens, 7);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), 2 * actual_tokens);
}

std::string usage_message(const std::string& path) {
  try {
    read_token_shard(path);
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UsageError for " << path;
  return "";
}

TEST(TokenShard, WritesTheLlmcLayoutByteForByte) {
  TempDir tmp;
  std::vector<int> tokens = {0, 1, 255, 256, 65535};
  write_token_shard(tmp / "a.bin", tokens);
  ASSERT_EQ(fs::file_size(tmp / "a.bin"), 1024u + 2 * tokens.size());
  std::ifstream in(tmp / "a.bin", std::ios::binary);
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), {});
  auto le32 = [&](size_t at) {
    return bytes[at] | bytes[at + 1] << 8 | bytes[at + 2] << 16 | bytes[at + 3] << 24;
  };
  EXPECT_EQ(le32(0), 20240520);
  EXPECT_EQ(le32(4), 1);
  EXPECT_EQ(le32(8), 5);
  for (size_t i = 12; i < 1024; ++i) EXPECT_EQ(bytes[i], 0) << i;
  // 256 = 0x0100 little-endian, 65535 = 0xffff.
  EXPECT_EQ(bytes[1024 + 6], 0x00);
  EXPECT_EQ(bytes[1024 + 7], 0x01);
  EXPECT_EQ(bytes[1024 + 8], 0xff);
  EXPECT_EQ(bytes[1024 + 9], 0xff);
}

TEST(TokenShard, RoundTripsAndReportsMaxId) {
  TempDir tmp;
  std::vector<uint16_t> tokens = {5, 300, 2, 50256};
  write_token_shard(tmp / "a.bin", std::span<const uint16_t>(tokens));
  EXPECT_EQ(read_token_shard(tmp / "a.bin"), tokens);
  EXPECT_EQ(read_token_shard_header(tmp / "a.bin"), 4);
  TokenShard shard(tmp / "a.bin");
  EXPECT_EQ(shard.size(), 4);
  EXPECT_EQ(shard.max_token_id(), 50256);
  EXPECT_EQ(max_token_id(std::span<const uint16_t>()), -1);
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
    write_token_shard(tmp / "a.bin", std::vector<int>{1, 65536});
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
  EXPECT_EQ(usage_message(tmp / "nope.bin"), "data file " + (tmp / "nope.bin") + " does not exist");
}

TEST(TokenShard, TooSmallForHeader) {
  TempDir tmp;
  std::ofstream(tmp / "t.bin") << "hello";
  std::string msg = usage_message(tmp / "t.bin");
  EXPECT_NE(msg.find("is 5 bytes, too small for the 1024-byte token-shard header"),
            std::string::npos)
      << msg;
}

TEST(TokenShard, WrongMagicShowsFoundAndExpected) {
  TempDir tmp;
  write_raw(tmp / "m.bin", 20240521, 1, 3, 3);
  std::string msg = usage_message(tmp / "m.bin");
  EXPECT_NE(msg.find(tmp / "m.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic number is 20240521, expected 20240520"), std::string::npos) << msg;
}

TEST(TokenShard, UnsupportedVersion) {
  TempDir tmp;
  write_raw(tmp / "v.bin", 20240520, 2, 3, 3);
  std::string msg = usage_message(tmp / "v.bin");
  EXPECT_NE(msg.find("unsupported token-shard version 2"), std::string::npos) << msg;
}

TEST(TokenShard, TruncatedTokens) {
  TempDir tmp;
  write_raw(tmp / "s.bin", 20240520, 1, 10, 7);
  std::string msg = usage_message(tmp / "s.bin");
  EXPECT_NE(msg.find("declares 10 tokens (expects 1044 bytes) but is 1038 bytes (truncated?)"),
            std::string::npos)
      << msg;
  EXPECT_THROW(read_token_shard_header(tmp / "s.bin"), UsageError);
}

TEST(TokenShard, TrailingBytes) {
  TempDir tmp;
  write_raw(tmp / "s.bin", 20240520, 1, 2, 3);
  std::string msg = usage_message(tmp / "s.bin");
  EXPECT_NE(msg.find("declares 2 tokens (expects 1028 bytes) but is 1030 bytes"), std::string::npos)
      << msg;
}

TEST(TokenShard, NegativeCount) {
  TempDir tmp;
  write_raw(tmp / "n.bin", 20240520, 1, -4, 0);
  EXPECT_NE(usage_message(tmp / "n.bin").find("negative token count"), std::string::npos);
}

}  // namespace
}  // namespace mt
