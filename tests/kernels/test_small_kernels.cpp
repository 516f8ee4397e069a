// Kernels outside the forward/backward harness: reductions and in-place special cases.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "kernels/crossentropy.h"
#include "kernels/gelu.h"
#include "kernels/kernel_harness.h"
#include "kernels/reduce.h"
#include "kernels/reference/reference.h"

namespace mt::test {
namespace {

TEST(Reduce, MatchReference) {
  for (size_t n : {size_t(0), size_t(1), size_t(17), size_t(100003)}) {
    Buf x = random_normal(n, 50), y = random_normal(n, 51);
    EXPECT_NEAR(sum_squares(x.data(), n), ref::sum_squares(x.data(), n),
                1e-12 * (1 + ref::sum_squares(x.data(), n)));
    Buf a = y, b = y;
    add_inplace(a.data(), x.data(), n);
    ref::add_inplace(b.data(), x.data(), n);
    EXPECT_EQ(a, b);
    scale_inplace(a.data(), n, 0.37f);
    ref::scale_inplace(b.data(), n, 0.37f);
    EXPECT_EQ(a, b);
  }
}

TEST(Reduce, AllFiniteFindsEveryBadValueAnywhere) {
  const float bad[] = {std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()};
  Buf x = random_normal(1001, 52);
  EXPECT_TRUE(all_finite(x.data(), x.size()));
  for (float v : bad)
    for (size_t pos : {size_t(0), size_t(15), size_t(16), size_t(1000)}) {
      Buf y = x;
      y[pos] = v;
      EXPECT_FALSE(all_finite(y.data(), y.size())) << v << " at " << pos;
    }
  x[3] = std::numeric_limits<float>::max();  // large but finite
  EXPECT_TRUE(all_finite(x.data(), x.size()));
}

TEST(Gelu, BackwardInPlaceOverwrites) {
  // dinp == dout: the gradient replaces dout instead of being added to it.
  const size_t n = 37;
  Buf x = random_normal(n, 53, 2.0f), d = random_normal(n, 54);
  Buf expect(n, 0.0f);
  ref::gelu_backward(expect.data(), x.data(), d.data(), n);
  gelu_backward(d.data(), x.data(), d.data(), n);
  EXPECT_LE(normalised_error(d, expect), 1e-5);
}

TEST(Gelu, ExtremeInputsStayFinite) {
  Buf x = {-1e4f, -90.0f, -10.0f, -1e-30f, 0.0f, 1e-30f, 10.0f, 90.0f, 1e4f}, y(x.size());
  gelu_forward(y.data(), x.data(), x.size());
  for (size_t i = 0; i < x.size(); i++) {
    double expect =
        0.5 * x[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
    EXPECT_NEAR(y[i], expect, 1e-6 * std::max(1.0, std::abs(expect))) << "x = " << x[i];
  }
}

TEST(CrossEntropy, ExtremeLogitsStayFinite) {
  // A row with one huge logit and one far below it: the max-subtraction must keep exp finite.
  const int V = 4;
  Buf logits = {80.0f, -80.0f, 0.0f, 79.0f};
  int target = 1;
  float loss = 0.0f;
  crossentropy_forward_backward(&loss, logits.data(), &target, 1.0f, 1, V, V);
  EXPECT_NEAR(loss, 160.0 + std::log1p(std::exp(-1.0)), 1e-4);
  for (float g : logits) EXPECT_TRUE(std::isfinite(g));
  EXPECT_NEAR(logits[1], -1.0f, 1e-6);
}

}  // namespace
}  // namespace mt::test
