// flash_attention_backward_prep's bf16 form (the output a --precision bf16 block keeps) reads
// its bf16 rows as they are: bit for bit the fp32 form on the rows converted to fp32 first,
// which is what the block did before, with a (B * Tq, H hd) fp32 copy. Head dims around the
// vector widths, strides wider than the heads.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/flash_attention.h"

namespace mt {
namespace {

TEST(FlashAttentionPrep, Bf16OutputEqualsTheFp32FormOnItsConversionBitForBit) {
  for (int hd : {2, 6, 16, 18, 32, 34, 64, 80, 128, 256})
    for (int H : {1, 3, 8}) {
      const int B = 2, T = 37;
      const size_t ld = size_t(H) * hd + size_t(hd % 3), n = size_t(B) * T * ld;
      std::mt19937 rng(unsigned(hd * 7 + H));
      std::normal_distribution<float> nd;
      std::vector<float> dout(n), out32(n);
      std::vector<bf16> out16(n);
      for (float& x : dout) x = nd(rng);
      for (size_t i = 0; i < n; i++) out16[i] = float_to_bf16(nd(rng));
      for (size_t i = 0; i < n; i++) out32[i] = bf16_to_float(out16[i]);
      std::vector<float> want(size_t(B) * H * T), got(want.size(), 7.0f);
      flash_attention_backward_prep(want.data(), out32.data(), ld, dout.data(), ld, B, T, H, hd);
      flash_attention_backward_prep(got.data(), out16.data(), ld, dout.data(), ld, B, T, H, hd);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * want.size()))
          << "hd " << hd << " H " << H;
    }
}

}  // namespace
}  // namespace mt
