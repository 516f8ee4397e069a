// Edge cases of the hand-vectorised (AVX-512) kernel paths that the reference comparison
// does not reach: the 16-lane exp against the scalar one, and NaN propagation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/gelu.h"
#include "kernels/vec_math.h"

namespace mt::test {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

#if defined(__AVX512F__)
TEST(VectorPaths, Exp512MatchesScalarExp) {
  std::vector<float> xs = {-1e30f, -200.f, -87.5f, -87.f, -10.f, -1.f, -1e-7f, 0.f,
                           1e-7f,  0.5f,   1.f,    10.f,  87.f,  88.f, 88.5f,  1e30f};
  for (float x = -90.f; x < 90.f; x += 0.37f) xs.push_back(x);
  xs.resize((xs.size() + 15) / 16 * 16, 0.f);
  for (size_t i = 0; i < xs.size(); i += 16) {
    alignas(64) float out[16];
    _mm512_store_ps(out, exp_vec512(_mm512_loadu_ps(&xs[i])));
    for (int l = 0; l < 16; l++) {
      const float want = exp_vec(xs[i + l]);
      EXPECT_NEAR(out[l], want, 4e-7f * want) << "x = " << xs[i + l];
    }
  }
  alignas(64) float out[16];
  _mm512_store_ps(out, exp_vec512(_mm512_set1_ps(kNaN)));
  EXPECT_TRUE(std::isnan(out[0]));
}
#endif

TEST(VectorPaths, GeluPropagatesNaN) {
  std::vector<float> x(37, 0.5f), y(37), d(37, 1.0f);
  x[3] = kNaN, x[35] = kNaN;  // one in the vector body, one in the tail
  gelu_forward(y.data(), x.data(), x.size());
  gelu_backward(d.data(), x.data(), d.data(), x.size());
  for (size_t i = 0; i < x.size(); i++) {
    EXPECT_EQ(std::isnan(y[i]), std::isnan(x[i])) << i;
    EXPECT_EQ(std::isnan(d[i]), std::isnan(x[i])) << i;
  }
}

TEST(VectorPaths, AttentionPropagatesNaN) {
  // B = 1, T = 40, C = 64, NH = 2 (head dim 32). A NaN key at position 5 of head 0 reaches
  // every later query of that head, and no earlier one (causality) nor head 1.
  const int T = 40, C = 64, NH = 2;
  std::vector<float> qkv(size_t(T) * 3 * C), out(size_t(T) * C), att(size_t(NH) * T * T);
  for (size_t i = 0; i < qkv.size(); i++) qkv[i] = std::sin(0.1f * float(i));
  qkv[size_t(5) * 3 * C + C + 7] = kNaN;
  attention_forward(out.data(), att.data(), qkv.data(), 1, T, C, NH);
  for (int t = 0; t < T; t++) {
    EXPECT_EQ(std::isnan(out[size_t(t) * C]), t >= 5) << "t = " << t;
    EXPECT_FALSE(std::isnan(out[size_t(t) * C + 32])) << "t = " << t;
  }
}

}  // namespace
}  // namespace mt::test
