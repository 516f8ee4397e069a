// The fp32 weight gradient's two orientations (kernels/matmul.h): the plain one and the
// transposed one that layers with at least four times as many outputs as inputs take (the
// MLP's fc). The harness cases of test_kernel_ops.cpp hold the default rule to the reference
// kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kernels/kernel_harness.h"
#include "kernels/matmul.h"
#include "kernels/matmul_weight_grad.h"

namespace mt::test {
namespace {

// dweight += dout^T @ inp onto a non-zero gradient (a second microbatch's), dbias too.
Buf weight_grad(Fp32WeightGradPath path, int N, int C, int OC, const Buf& dy, const Buf& x) {
  const ScopedFp32WeightGradPath use(path);
  Buf dw(size_t(OC) * C, 0.5f);
  matmul_backward_weight(dw.data(), nullptr, dy.data(), x.data(), N, C, OC);
  return dw;
}

// Both orientations compute the same sums within fp32 rounding (relative to sqrt(N), the
// products' scale), over widths on both sides of the rule and odd ones off the 16-wide blocks.
TEST(MatmulWeightGrad, OrientationsAgreeWithinFp32Rounding) {
  for (const auto& [N, C, OC] : {std::tuple{256, 64, 256}, std::tuple{256, 256, 64},
                                 std::tuple{33, 17, 71}, std::tuple{5, 1, 4}}) {
    const Buf dy = random_normal(size_t(N) * OC, 101), x = random_normal(size_t(N) * C, 102);
    const Buf by_shape = weight_grad(Fp32WeightGradPath::by_shape, N, C, OC, dy, x);
    const Buf plain = weight_grad(Fp32WeightGradPath::plain, N, C, OC, dy, x);
    const float tol = 1e-5f * std::sqrt(float(N)) + 1e-6f;
    size_t bad = 0;
    for (size_t i = 0; i < plain.size(); ++i) bad += !(std::fabs(by_shape[i] - plain[i]) <= tol);
    EXPECT_EQ(bad, 0u) << str("N ", N, " C ", C, " OC ", OC);
  }
}

// Which orientation runs: transposed exactly where OC >= 4 C and the rule is on. At this shape
// the two orientations' bits differ (the test checks that first), so the route shows in them.
TEST(MatmulWeightGrad, LayersWithFourTimesMoreOutputsRunTransposed) {
  EXPECT_TRUE(fp32_weight_grad_transposed(256, 1024));
  EXPECT_TRUE(fp32_weight_grad_transposed(3, 13));
  EXPECT_FALSE(fp32_weight_grad_transposed(256, 768));
  EXPECT_FALSE(fp32_weight_grad_transposed(1024, 256));
  EXPECT_FALSE(fp32_weight_grad_transposed(256, 256));
  // Up to 4 MiB of scratch (d512's fc); an LM head's vocabulary keeps the plain orientation.
  EXPECT_TRUE(fp32_weight_grad_transposed(512, 2048));
  EXPECT_FALSE(fp32_weight_grad_transposed(512, 2052));
  EXPECT_FALSE(fp32_weight_grad_transposed(768, 50257));
  {
    const ScopedFp32WeightGradPath plain(Fp32WeightGradPath::plain);
    EXPECT_FALSE(fp32_weight_grad_transposed(256, 1024));
  }
  const int N = 512, C = 96, OC = 416;
  const Buf dy = random_normal(size_t(N) * OC, 111), x = random_normal(size_t(N) * C, 112);
  const Buf by_shape = weight_grad(Fp32WeightGradPath::by_shape, N, C, OC, dy, x);
  const Buf plain = weight_grad(Fp32WeightGradPath::plain, N, C, OC, dy, x);
  // The transposed orientation by hand: dW^T = x^T dy, then added transposed.
  Buf t(size_t(C) * OC), by_hand(size_t(OC) * C, 0.5f);
  sgemm(true, false, C, OC, N, 1.0f, x.data(), C, dy.data(), OC, 0.0f, t.data(), OC);
  for (int o = 0; o < OC; ++o)
    for (int c = 0; c < C; ++c) by_hand[size_t(o) * C + c] += t[size_t(c) * OC + o];
  ASSERT_NE(by_hand, plain) << "the orientations agree bit for bit here: the test cannot tell";
  EXPECT_EQ(by_shape, by_hand);
}

}  // namespace
}  // namespace mt::test
