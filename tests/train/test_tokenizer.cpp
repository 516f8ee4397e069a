// The tokenizer a model's ids are decoded with (train/tokenizer.h): without a record, the
// byte tokenizer up to a vocabulary of 256 and nothing above; and that byte tokenizer's
// contract (data/tokenizer.h): id = byte value, every byte round-trips, other ids refused.
#include "train/tokenizer.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mt {
namespace {

TEST(TokenizerFor, WithoutARecordBytesDecodeUpTo256IdsAndNothingAbove) {
  const std::unique_ptr<Tokenizer> bytes = tokenizer_for(std::nullopt, 256);
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(bytes->kind(), "byte");
  EXPECT_NE(tokenizer_for(std::nullopt, 2), nullptr);
  EXPECT_EQ(tokenizer_for(std::nullopt, 257), nullptr);
}

TEST(TokenizerFor, TheByteTokenizerEncodesBytesAsIds) {
  const std::unique_ptr<Tokenizer> bytes = tokenizer_for(std::nullopt, 256);
  EXPECT_EQ(bytes->encode(std::string("Hi\n\x00\xff\xc3\xa9", 7)),
            (std::vector<int>{72, 105, 10, 0, 255, 195, 169}));
  EXPECT_TRUE(bytes->encode("").empty());
}

TEST(TokenizerFor, TheByteTokenizerRoundTripsEveryByte) {
  const std::unique_ptr<Tokenizer> bytes = tokenizer_for(std::nullopt, 256);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::vector<int> ids = bytes->encode(all);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(bytes->decode(ids), all);
}

TEST(TokenizerFor, TheByteTokenizerRefusesIdsOutsideTheByteRange) {
  const std::unique_ptr<Tokenizer> bytes = tokenizer_for(std::nullopt, 256);
  try {
    bytes->decode(std::vector<int>{65, 300});
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 300 at position 1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(bytes->decode(std::vector<int>{-1}), UsageError);
}

}  // namespace
}  // namespace mt
