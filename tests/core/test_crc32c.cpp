#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace mt {
namespace {

// The check value of CRC-32C (RFC 3720, appendix B.4) and its test vectors.
TEST(Crc32c, KnownValues) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32c_update(0, digits.data(), digits.size()), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c_update(0, zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c_update(0, ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c_update(0, nullptr, 0), 0u);
  EXPECT_EQ(crc32c_hex(0xE3069283u), "e3069283");
  std::printf("crc32c path on this CPU: %s\n", crc32c_path());
}

// A file's checksum is streamed as it is written: any split must give the same value, and
// one flipped bit must change it.
TEST(Crc32c, PiecesAndFlippedBits) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 31 + 7);
  const uint32_t whole = crc32c_update(0, data.data(), data.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(513), data.size()}) {
    uint32_t c = crc32c_update(0, data.data(), cut);
    c = crc32c_update(c, data.data() + cut, data.size() - cut);
    EXPECT_EQ(c, whole) << "cut at " << cut;
  }
  for (size_t bit : {size_t(0), size_t(4001), size_t(7999)}) {
    std::string flipped = data;
    flipped[bit / 8] ^= char(1 << (bit % 8));
    EXPECT_NE(crc32c_update(0, flipped.data(), flipped.size()), whole) << "bit " << bit;
  }
}

}  // namespace
}  // namespace mt
