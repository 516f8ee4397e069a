// The register-blocked attention kernels dispatch on the head dim through one list
// (kernels/attention_avx512_tiles.h): every head dim the *_supports functions accept runs,
// every other one is refused by the kernel itself rather than skipped silently, in fp32 and
// in bf16 alike.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/attention_avx512.h"
#include "kernels/attention_bf16_avx512.h"

namespace mt {
namespace {

constexpr int kT = 5;

struct OneHead {
  std::vector<float> qkv, out, att, dqkv, datt;
  AttentionHead view;
  explicit OneHead(int hd)
      : qkv(size_t(kT) * 3 * hd),
        out(size_t(kT) * hd),
        att(kT * kT),
        dqkv(qkv.size()),
        datt(kT * kT) {
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = float(std::sin(0.37 * double(i)));
    const float* q = qkv.data();
    view = {q, q + hd, q + 2 * hd, 3 * hd, kT, hd, 1.0f / std::sqrt(float(hd))};
  }
  bool wrote_probabilities() const {
    for (int i = 0; i < kT; ++i) {
      float sum = 0;
      for (int j = 0; j < kT; ++j) sum += att[i * kT + j];
      if (std::fabs(sum - 1.0f) > 1e-4f) return false;
    }
    return true;
  }
};

TEST(AttentionHeadDims, Fp32KernelsRunExactlyTheSupportedDims) {
  if (!attention_avx512_supports(64)) GTEST_SKIP() << "a build without AVX-512";
  int supported = 0;
  for (int hd = 1; hd <= 160; ++hd) {
    OneHead h(hd);
    float* dq = h.dqkv.data();
    auto backward = [&] {
      attention_head_backward_avx512(h.view, dq, dq + hd, dq + 2 * hd, 3 * hd, h.out.data(), hd,
                                     h.att.data(), h.datt.data());
    };
    if (!attention_avx512_supports(hd)) {
      EXPECT_THROW(attention_head_forward_avx512(h.view, h.out.data(), hd, h.att.data()),
                   RuntimeError)
          << hd;
      EXPECT_THROW(backward(), RuntimeError) << hd;
      continue;
    }
    ++supported;
    attention_head_forward_avx512(h.view, h.out.data(), hd, h.att.data());
    EXPECT_TRUE(h.wrote_probabilities()) << hd;
    backward();
  }
  EXPECT_EQ(supported, 4);  // 16, 32, 64, 128
}

TEST(AttentionHeadDims, Bf16KernelsRunExactlyTheSupportedDims) {
  if (!attention_bf16_avx512_supports(64)) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  int supported = 0;
  for (int hd = 1; hd <= 160; ++hd) {
    OneHead h(hd);
    float* dq = h.dqkv.data();
    auto backward = [&] {
      attention_head_backward_bf16(h.view, dq, dq + hd, dq + 2 * hd, 3 * hd, h.out.data(), hd,
                                   h.att.data(), /*accumulate=*/true);
    };
    if (!attention_bf16_avx512_supports(hd)) {
      EXPECT_THROW(attention_head_forward_bf16(h.view, h.out.data(), hd, h.att.data()),
                   RuntimeError)
          << hd;
      EXPECT_THROW(backward(), RuntimeError) << hd;
      continue;
    }
    ++supported;
    attention_head_forward_bf16(h.view, h.out.data(), hd, h.att.data());
    EXPECT_TRUE(h.wrote_probabilities()) << hd;
    backward();
  }
  EXPECT_EQ(supported, 4);
}

}  // namespace
}  // namespace mt
