// Kernels outside the forward/backward harness: reductions and in-place special cases.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/kernel_harness.h"
#include "kernels/reduce.h"
#include "kernels/reference/reference.h"

namespace mt::test {
namespace {

// Context parallelism: a rank's rows read and write the position table at their true
// positions, so its rows of the embedding are the whole sequence's rows, and its position
// gradient is the whole sequence's with the other ranks' rows zero.
TEST(Embedding, PositionsPickTheRowsOfTheWholeSequence) {
  const int B = 2, T = 8, C = 5, V = 7;
  const std::vector<int> pos = {1, 6, 2, 5};  // a zigzag shard: T/cp rows
  const int Tl = int(pos.size());
  std::vector<int> idx(size_t(B) * T);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int(i * 3 % V);
  std::vector<int> idx_local(size_t(B) * Tl);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tl; ++t) idx_local[size_t(b) * Tl + t] = idx[size_t(b) * T + pos[t]];
  Buf wte = random_normal(size_t(V) * C, 60), wpe = random_normal(size_t(T) * C, 61);
  Buf whole(size_t(B) * T * C), local(size_t(B) * Tl * C);
  embedding_forward(whole.data(), idx.data(), wte.data(), wpe.data(), B, T, C, 0, V);
  embedding_forward(local.data(), idx_local.data(), wte.data(), wpe.data(), B, Tl, C, 0, V,
                    pos.data());
  Buf dout_local = random_normal(local.size(), 62), dout_whole(whole.size(), 0.0f);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tl; ++t)
      for (int c = 0; c < C; ++c) {
        const size_t l = (size_t(b) * Tl + t) * C + c, w = (size_t(b) * T + pos[t]) * C + c;
        EXPECT_EQ(local[l], whole[w]);
        dout_whole[w] = dout_local[l];
      }
  Buf dwte_w(wte.size(), 0.0f), dwpe_w(wpe.size(), 0.0f), dwte_l = dwte_w, dwpe_l = dwpe_w;
  embedding_backward(dwte_w.data(), dwpe_w.data(), dout_whole.data(), idx.data(), B, T, C, 0, V);
  embedding_backward(dwte_l.data(), dwpe_l.data(), dout_local.data(), idx_local.data(), B, Tl, C, 0,
                     V, pos.data());
  EXPECT_EQ(dwpe_l, dwpe_w);
  for (size_t i = 0; i < dwte_w.size(); ++i) EXPECT_FLOAT_EQ(dwte_l[i], dwte_w[i]);
}

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
