#include <gtest/gtest.h>

#include "core/base64.h"

namespace mt {
namespace {

TEST(Base64, KnownVectorsOfRfc4648) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    EXPECT_EQ(base64_encode(plain), coded);
    EXPECT_EQ(base64_decode(coded), std::optional<std::string>(plain)) << coded;
  }
}

TEST(Base64, EveryByteRoundTrips) {
  std::string bytes;
  for (int i = 0; i < 256 * 3 + 2; ++i) bytes += char(i * 7 % 256);
  for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(3), bytes.size()})
    EXPECT_EQ(base64_decode(base64_encode(bytes.substr(0, n))), bytes.substr(0, n)) << n;
}

TEST(Base64, MalformedTextIsRefused) {
  for (const char* bad : {"Zg=", "Z===", "Zm9v!mFy", "=Zm9", "Zg==Zg==", "Zm 9v"})
    EXPECT_FALSE(base64_decode(bad).has_value()) << bad;
}

}  // namespace
}  // namespace mt
