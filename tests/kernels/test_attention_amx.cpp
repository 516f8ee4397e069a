// The hand-written AMX attention core (kernels/attention_amx.h) through attention.h's bf16
// entry points: against the naive fp32 reference (kernels/reference) and against the kernel
// the CPU runs without it (AmxTiles::forbid: the AVX512-BF16 register tiles at head dim 32,
// oneDNN's batched matmuls at 64 and 128), at every head dim it runs and at sequence lengths
// on, off and across its 32-row blocks. Bounds: bf16 operands carry a relative rounding of
// 2^-9, so results agree to about 1%, never bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_amx.h"
#include "kernels/bf16.h"
#include "kernels/reference/reference.h"
#include "test_util/rel_diff.h"

namespace mt {
namespace {

using Buf = std::vector<float>;

Buf normal(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  Buf v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

double rel(const Buf& got, const Buf& want) {
  return test_util::max_rel_diff(got.data(), want.data(), got.size());
}

struct Shape {
  int hd, T;
};

// One forward and backward of B = 2 sequences and NH = 2 heads.
struct Result {
  Buf out, att, dqkv;
};

struct Case {
  int B = 2, NH = 2, T, C;
  Buf qkv, dout;
  explicit Case(Shape s) : T(s.T), C(2 * s.hd) {
    qkv = normal(size_t(B) * T * 3 * C, 11 + T);
    dout = normal(size_t(B) * T * C, 12 + T);
  }
  size_t att_size() const { return size_t(B) * NH * T * T; }
  Result bf16(AmxTiles amx) const {
    Result r{Buf(dout.size()), Buf(att_size(), 7.0f), Buf(qkv.size(), 0.0f)};
    Buf scratch(attention_backward_scratch_floats(B, T, C, NH));
    attention_forward_bf16(r.out.data(), r.att.data(), qkv.data(), B, T, C, NH, amx);
    attention_backward_bf16(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), r.att.data(), B,
                            T, C, NH, /*accumulate=*/false, amx);
    return r;
  }
  Result reference() const {
    Result r{Buf(dout.size()), Buf(att_size()), Buf(qkv.size(), 0.0f)};
    Buf scratch(attention_backward_scratch_floats(B, T, C, NH));
    ref::attention_forward(r.out.data(), r.att.data(), qkv.data(), B, T, C, NH);
    ref::attention_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), r.att.data(), B,
                            T, C, NH);
    return r;
  }
};

class AttentionAmx : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (!attention_amx_supports(GetParam().hd)) GTEST_SKIP() << "no AMX tiles on this CPU";
    ASSERT_EQ(attention_kernel(true, 2 * GetParam().hd, 2), AttentionKernel::bf16_amx_tiles);
  }
};

TEST_P(AttentionAmx, MatchesTheNaiveReference) {
  const Case c(GetParam());
  const Result got = c.bf16(AmxTiles::allow), want = c.reference();
  EXPECT_LT(rel(got.out, want.out), 2e-2);
  EXPECT_LT(rel(got.att, want.att), 1e-2);
  EXPECT_LT(rel(got.dqkv, want.dqkv), 2e-2);
  for (int bh = 0; bh < c.B * c.NH; ++bh)
    for (int i = 0; i < c.T; ++i) {
      const float* row = got.att.data() + (size_t(bh) * c.T + i) * c.T;
      double sum = 0;
      for (int j = 0; j <= i; ++j) sum += row[j];
      EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << i;
      for (int j = i + 1; j < c.T; ++j) ASSERT_EQ(row[j], 0.0f) << "above the diagonal";
    }
}

TEST_P(AttentionAmx, AgreesWithTheKernelItReplaces) {
  const Case c(GetParam());
  ASSERT_NE(attention_kernel(true, c.C, c.NH, AmxTiles::forbid), AttentionKernel::bf16_amx_tiles);
  const Result got = c.bf16(AmxTiles::allow), want = c.bf16(AmxTiles::forbid);
  EXPECT_LT(rel(got.out, want.out), 2e-2);
  EXPECT_LT(rel(got.att, want.att), 1e-2);
  EXPECT_LT(rel(got.dqkv, want.dqkv), 2e-2);
}

// accumulate true adds the gradient to what dqkv holds (the same fp32 additions as adding
// the overwritten gradient afterwards); false ignores what it holds, NaN included.
TEST_P(AttentionAmx, AccumulatesOrOverwrites) {
  const Case c(GetParam());
  const Result r = c.bf16(AmxTiles::allow);
  Buf scratch(attention_backward_scratch_floats(c.B, c.T, c.C, c.NH));
  const Buf held = normal(c.qkv.size(), 99);
  Buf acc = held, over(c.qkv.size(), std::numeric_limits<float>::quiet_NaN());
  attention_backward_bf16(acc.data(), scratch.data(), c.dout.data(), c.qkv.data(), r.att.data(),
                          c.B, c.T, c.C, c.NH);
  attention_backward_bf16(over.data(), scratch.data(), c.dout.data(), c.qkv.data(), r.att.data(),
                          c.B, c.T, c.C, c.NH, /*accumulate=*/false);
  EXPECT_EQ(over, r.dqkv);
  for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(acc[i], held[i] + r.dqkv[i]) << i;
}

// The bf16-output forms (the bf16 block's) are to_bf16 of the fp32-output ones, bit for bit,
// at any T (the backward writes each gradient row once, so no fp32 stage past T 128).
TEST_P(AttentionAmx, Bf16OutputsAreTheRoundedFp32Outputs) {
  const Case c(GetParam());
  const Result r = c.bf16(AmxTiles::allow);
  Buf stage(c.qkv.size(), std::numeric_limits<float>::quiet_NaN()), att(c.att_size());
  Buf scratch(attention_backward_scratch_floats(c.B, c.T, c.C, c.NH));
  std::vector<bf16> out16(c.dout.size()), d16(c.qkv.size()), want_out(out16.size()),
      want_d(d16.size());
  attention_forward_bf16_out16(out16.data(), stage.data(), att.data(), c.qkv.data(), c.B, c.T, c.C,
                               c.NH);
  attention_backward_bf16_out16(d16.data(), stage.data(), scratch.data(), c.dout.data(),
                                c.qkv.data(), att.data(), c.B, c.T, c.C, c.NH);
  to_bf16(want_out.data(), r.out.data(), r.out.size());
  to_bf16(want_d.data(), r.dqkv.data(), r.dqkv.size());
  EXPECT_EQ(att, r.att);
  EXPECT_EQ(out16, want_out);
  EXPECT_EQ(d16, want_d);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionAmx,
                         ::testing::Values(Shape{32, 1}, Shape{32, 31}, Shape{32, 32},
                                           Shape{32, 33}, Shape{32, 128}, Shape{32, 200},
                                           Shape{64, 17}, Shape{64, 64}, Shape{64, 130},
                                           Shape{128, 5}, Shape{128, 96}, Shape{128, 161}),
                         [](const auto& info) {
                           return "hd" + std::to_string(info.param.hd) + "_T" +
                                  std::to_string(info.param.T);
                         });

}  // namespace
}  // namespace mt
