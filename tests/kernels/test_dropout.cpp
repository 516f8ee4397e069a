// Philox4x32-10 against Random123's known answers, and dropout masks that depend only on
// (seed, step, site, global token, feature): any split of the rows or features draws the
// same mask as one worker.
#include "kernels/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/attention.h"
#include "kernels/philox.h"
#include "kernels/reference/attention_dropout.h"

namespace mt {
namespace {

// Random123's kat_vectors for philox4x32 with 10 rounds.
TEST(Philox, KnownAnswersOfRandom123) {
  struct Kat {
    PhiloxCounter ctr;
    PhiloxKey key;
    PhiloxCounter want;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) EXPECT_EQ(philox4x32_10(k.ctr, k.key), k.want);
}

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25f + float(i % 97) * 0.5f;
  return v;
}

TEST(Dropout, ZeroProbabilityIsTheIdentityBitwise) {
  const std::vector<float> x = ramp(6 * 10);
  std::vector<float> y(x.size(), -1.0f);
  const std::vector<int64_t> tokens = {0, 1, 2, 3, 4, 5};
  dropout_forward(y.data(), x.data(), 6, 10, tokens.data(), 0, {1, 2, 3}, 0.0f);
  EXPECT_EQ(y, x);
  dropout_backward(y.data(), y.data(), 6, 10, tokens.data(), 0, {1, 2, 3}, 0.0f);
  EXPECT_EQ(y, x);
}

// One worker's (8 tokens, 12 features) against two microbatches of rows in another order and
// a tensor-parallel split of the features: the same elements are dropped and scaled.
TEST(Dropout, MaskDependsOnlyOnTokenAndFeatureNotOnTheSplit) {
  const int rows = 8, C = 12;
  const float p = 0.3f;
  const DropoutKey key{1337, 5, 9};
  const std::vector<float> x = ramp(size_t(rows) * C);
  std::vector<int64_t> tokens(rows);
  std::iota(tokens.begin(), tokens.end(), 1000);
  std::vector<float> whole(x.size());
  dropout_forward(whole.data(), x.data(), rows, C, tokens.data(), 0, key, p);
  // Rows 5..7 then 0..4, each with its global token index; features 0..6 and 7..11.
  for (const auto& [first, count] : {std::pair{5, 3}, std::pair{0, 5}}) {
    for (const auto& [f0, fc] : {std::pair{0, 7}, std::pair{7, 5}}) {
      std::vector<float> in, out(size_t(count) * fc);
      for (int r = first; r < first + count; ++r)
        in.insert(in.end(), x.begin() + r * C + f0, x.begin() + r * C + f0 + fc);
      dropout_forward(out.data(), in.data(), count, fc, tokens.data() + first, f0, key, p);
      for (int r = 0; r < count; ++r)
        for (int c = 0; c < fc; ++c)
          EXPECT_EQ(out[size_t(r * fc + c)], whole[size_t((first + r) * C + f0 + c)]);
    }
  }
  // dropout_keeps says the same, element by element.
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < C; ++c)
      EXPECT_EQ(dropout_keeps(key, p, tokens[size_t(r)], c), whole[size_t(r * C + c)] != 0.0f);
}

TEST(Dropout, KeepsAboutOneMinusPAndScalesAndBackwardUsesTheSameMask) {
  const int rows = 64, C = 256;
  const float p = 0.25f;
  const std::vector<float> x(size_t(rows) * C, 1.0f);
  std::vector<int64_t> tokens(rows);
  std::iota(tokens.begin(), tokens.end(), 0);
  std::vector<float> y(x.size()), dx(x.size());
  dropout_forward(y.data(), x.data(), rows, C, tokens.data(), 0, {7, 1, 0}, p);
  size_t kept = 0;
  for (float v : y) {
    EXPECT_TRUE(v == 0.0f || v == 1.0f / (1.0f - p)) << v;
    kept += v != 0.0f;
  }
  // 16384 Bernoulli(0.75) draws: the standard deviation of the share is 0.0034.
  EXPECT_NEAR(double(kept) / double(x.size()), 0.75, 0.02);
  dropout_backward(dx.data(), x.data(), rows, C, tokens.data(), 0, {7, 1, 0}, p);
  EXPECT_EQ(dx, y);  // linear: its backward is itself, with the regenerated mask
  // Another step, site or seed: another mask.
  for (const DropoutKey other : {DropoutKey{7, 2, 0}, DropoutKey{7, 1, 1}, DropoutKey{8, 1, 0}}) {
    std::vector<float> z(x.size());
    dropout_forward(z.data(), x.data(), rows, C, tokens.data(), 0, other, p);
    EXPECT_NE(z, y);
  }
}

struct AttentionCase {
  int B = 2, T = 5, C = 8, NH = 2;
  std::vector<float> qkv;
  std::vector<int64_t> tokens;
  AttentionCase() {
    qkv.resize(size_t(B) * T * 3 * C);
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = float(std::sin(0.7 * double(i) + 0.3));
    tokens.resize(size_t(B) * T);
    std::iota(tokens.begin(), tokens.end(), 40);
  }
  // sum(out * w) for a fixed w: a scalar whose gradient is the backward of dout = w.
  double loss(const std::vector<float>& x, const AttentionDropout& d) const {
    std::vector<float> out(size_t(B) * T * C), att(size_t(B) * NH * T * T);
    attention_dropout_forward(out.data(), att.data(), x.data(), B, T, C, NH, d);
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * std::cos(double(i));
    return s;
  }
};

TEST(AttentionDropout, WithoutDropoutItIsTheAttentionCore) {
  AttentionCase c;
  const AttentionDropout d{{1, 1, 3}, 0.0f, c.tokens.data(), 0};
  std::vector<float> out(size_t(c.B) * c.T * c.C), att(size_t(c.B) * c.NH * c.T * c.T);
  std::vector<float> ref_out = out, ref_att = att;
  attention_dropout_forward(out.data(), att.data(), c.qkv.data(), c.B, c.T, c.C, c.NH, d);
  attention_forward(ref_out.data(), ref_att.data(), c.qkv.data(), c.B, c.T, c.C, c.NH);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], ref_out[i], 1e-5f) << i;
  for (size_t i = 0; i < att.size(); ++i) EXPECT_NEAR(att[i], ref_att[i], 1e-6f) << i;
}

// The backward (mask regenerated from the counters) against central differences of the
// forward with dropout 0.3: the mask is fixed by (token, head, key), so the loss is smooth.
TEST(AttentionDropout, BackwardMatchesFiniteDifferences) {
  AttentionCase c;
  const AttentionDropout d{{5, 2, 7}, 0.3f, c.tokens.data(), 1};
  std::vector<float> dout(size_t(c.B) * c.T * c.C), dqkv(c.qkv.size());
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = float(std::cos(double(i)));
  std::vector<float> out(dout.size()), att(size_t(c.B) * c.NH * c.T * c.T);
  attention_dropout_forward(out.data(), att.data(), c.qkv.data(), c.B, c.T, c.C, c.NH, d);
  attention_dropout_backward(dqkv.data(), dout.data(), c.qkv.data(), att.data(), c.B, c.T, c.C,
                             c.NH, d);
  const float eps = 1e-2f;
  for (size_t i = 0; i < c.qkv.size(); ++i) {
    std::vector<float> plus = c.qkv, minus = c.qkv;
    plus[i] += eps;
    minus[i] -= eps;
    const double numeric = (c.loss(plus, d) - c.loss(minus, d)) / (2 * double(eps));
    EXPECT_NEAR(dqkv[i], numeric, 2e-3 + 2e-3 * std::abs(numeric)) << "qkv element " << i;
  }
  // Some probabilities were dropped: the output differs from the attention core's.
  std::vector<float> ref_out(out.size()), ref_att(att.size());
  attention_forward(ref_out.data(), ref_att.data(), c.qkv.data(), c.B, c.T, c.C, c.NH);
  EXPECT_NE(out, ref_out);
}

}  // namespace
}  // namespace mt
