// to_bf16_in_place (kernels/bf16.h): the rounding written over its own fp32 input equals
// to_bf16 into another buffer bit for bit, whole vectors, the tail and specials alike.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/kernel_harness.h"

namespace mt::test {
namespace {

TEST(Bf16InPlace, EqualsTheRoundingIntoAnotherBuffer) {
  for (const size_t n : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(33), size_t(70001)}) {
    Buf x = random_normal(n, 31, 3.0f);
    if (n > 20) {
      x[3] = std::numeric_limits<float>::quiet_NaN();
      x[4] = std::numeric_limits<float>::infinity();
      x[5] = -0.0f;
      x[17] = std::bit_cast<float>(0x7F7FFFFFu);     // FLT_MAX: rounds up to infinity
      x[n - 1] = std::bit_cast<float>(0x3F808000u);  // a tie: to even
    }
    std::vector<bf16> want(n);
    to_bf16(want.data(), x.data(), n);
    const bf16* got = to_bf16_in_place(x.data(), n);
    EXPECT_EQ(static_cast<const void*>(got), static_cast<const void*>(x.data()));
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << "n " << n << " element " << i;
  }
}

}  // namespace
}  // namespace mt::test
