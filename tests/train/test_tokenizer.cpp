#include "train/tokenizer.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mt {
namespace {

TEST(ByteTokenizer, EncodesBytesAsIds) {
  std::vector<int> t = ByteTokenizer::encode(std::string("Hi\n\x00\xff\xc3\xa9", 7));
  EXPECT_EQ(t, (std::vector<int>{72, 105, 10, 0, 255, 195, 169}));
}

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::vector<int> t = ByteTokenizer::encode(all);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(t[b], b);
  EXPECT_EQ(ByteTokenizer::decode(t), all);
  EXPECT_EQ(ByteTokenizer::decode_token(233), "\xe9");
  EXPECT_TRUE(ByteTokenizer::encode("").empty());
}

TEST(ByteTokenizer, RejectsIdsOutsideByteRange) {
  std::vector<int> t = {65, 300};
  try {
    ByteTokenizer::decode(t);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 300 at position 1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ByteTokenizer::decode_token(-1), UsageError);
}

}  // namespace
}  // namespace mt
