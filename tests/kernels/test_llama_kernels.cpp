// The Llama family's kernels (RMSNorm, SwiGLU, RoPE) through the one harness
// (kernel_harness.h: fast vs reference, += semantics, finite differences), their bf16-output
// twins against to_bf16 of the fp32 results bit for bit, and the RoPE table against the
// formulas of docs/contracts.md section 9 (with Llama 3.1's rope_scaling).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>

#include "core/error.h"
#include "kernels/bf16.h"
#include "kernels/kernel_harness.h"
#include "kernels/reference/reference.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace mt::test {
namespace {

KernelCase rmsnorm_case(int N, int C, float offset) {
  KernelCase kc;
  kc.name = str("rmsnorm_N", N, "_C", C);
  Buf x = random_normal(size_t(N) * C, 21, 2.0f);
  for (float& v : x) v += offset;  // RMSNorm does not centre: a mean must not matter
  const float eps = 1e-5f;
  kc.inputs = {x, random_normal(C, 22)};
  kc.output_sizes = {size_t(N) * C, size_t(N)};  // out, rstd
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    MT_DISPATCH(impl, rmsnorm_forward, out[0].data(), out[1].data(), in[0].data(), in[1].data(), N,
                C, eps);
  };
  kc.backwards.push_back(
      {"backward_input",
       {0},
       true,
       [=](Impl impl, const Bufs& in, const Bufs& out, const Buf& dout, Bufs& din) {
         MT_DISPATCH(impl, rmsnorm_backward_input, din[0].data(), dout.data(), in[0].data(),
                     in[1].data(), out[1].data(), N, C);
       }});
  kc.backwards.push_back(
      {"backward_weight",
       {1},
       true,
       [=](Impl impl, const Bufs& in, const Bufs& out, const Buf& dout, Bufs& din) {
         MT_DISPATCH(impl, rmsnorm_backward_weight, din[1].data(), dout.data(), in[0].data(),
                     out[1].data(), N, C);
       }});
  return kc;
}

KernelCase swiglu_case(int N, int F) {
  KernelCase kc;
  kc.name = str("swiglu_N", N, "_F", F);
  kc.inputs = {random_normal(size_t(N) * 2 * F, 23, 3.0f)};  // rows of [gate | up]
  kc.output_sizes = {size_t(N) * F};
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    MT_DISPATCH(impl, swiglu_forward, out[0].data(), in[0].data(), N, F);
  };
  kc.backwards.push_back({"backward",
                          {0},
                          true,
                          [=](Impl impl, const Bufs& in, const Bufs&, const Buf& dout, Bufs& din) {
                            MT_DISPATCH(impl, swiglu_backward, din[0].data(), in[0].data(),
                                        dout.data(), N, F, true);
                          }});
  return kc;
}

// q/k-like rows: `heads` head vectors of hd dims at a row stride wider than them (the rows
// of a fused qkv buffer), positions shuffled (as a context-parallel rank holds them).
KernelCase rope_case(int rows, int T, int heads, int hd, int pad, bool shuffled) {
  KernelCase kc;
  kc.name = str("rope_rows", rows, "_T", T, "_heads", heads, "_hd", hd, shuffled ? "_zigzag" : "");
  const size_t stride = size_t(heads) * hd + pad;
  auto table = std::make_shared<RopeTable>(hd, 4 * T, 10000.0);
  auto pos = std::make_shared<std::vector<int>>(T);
  for (int t = 0; t < T; t++) (*pos)[t] = shuffled ? (t * 7 + 3) % (4 * T) : t;
  kc.inputs = {random_normal(size_t(rows) * stride, 25)};
  kc.output_sizes = {size_t(rows) * stride};
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    out[0] = in[0];
    MT_DISPATCH(impl, rope_forward, out[0].data(), rows, stride, heads, T, pos->data(), *table);
  };
  kc.backwards.push_back(
      {"backward", {0}, true, [=](Impl impl, const Bufs&, const Bufs&, const Buf& dout, Bufs& din) {
         Buf d = dout;  // rotated back in place, then accumulated (the pad passes through)
         MT_DISPATCH(impl, rope_backward, d.data(), rows, stride, heads, T, pos->data(), *table);
         for (size_t i = 0; i < d.size(); i++) din[0][i] += d[i];
       }});
  return kc;
}

std::vector<KernelCase> make_cases() {
  std::vector<KernelCase> cases;
  cases.push_back(rmsnorm_case(1, 3, 0.0f));
  cases.push_back(rmsnorm_case(7, 13, 3.0f));
  cases.push_back(rmsnorm_case(32, 256, 0.0f));
  cases.push_back(rmsnorm_case(3, 1000, -2.0f));
  cases.push_back(swiglu_case(1, 1));
  cases.push_back(swiglu_case(3, 17));
  cases.push_back(swiglu_case(8, 300));
  cases.push_back(rope_case(1, 1, 1, 2, 0, false));
  cases.push_back(rope_case(6, 3, 2, 8, 5, false));
  cases.push_back(rope_case(16, 8, 3, 64, 0, true));
  cases.push_back(rope_case(10, 5, 1, 128, 3, true));
  return cases;
}

const std::vector<KernelCase>& all_cases() {
  static const std::vector<KernelCase> cases = make_cases();
  return cases;
}

class LlamaKernelOp : public ::testing::TestWithParam<size_t> {};

TEST_P(LlamaKernelOp, MatchesReferenceAndFiniteDifferences) {
  const KernelCase& kc = all_cases()[GetParam()];
  SCOPED_TRACE(kc.name);
  check_kernel_case(kc);
}

INSTANTIATE_TEST_SUITE_P(All, LlamaKernelOp, ::testing::Range<size_t>(0, all_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return all_cases()[info.param].name;
                         });

std::vector<bf16> rounded(const Buf& x) {
  std::vector<bf16> out(x.size());
  to_bf16(out.data(), x.data(), x.size());
  return out;
}

TEST(LlamaKernelsBf16, RmsnormOutputIsTheRoundedFp32Output) {
  const int N = 9, C = 67;
  const Buf x = random_normal(size_t(N) * C, 31, 3.0f), w = random_normal(C, 32);
  Buf out(x.size()), rstd(N), rstd16(N);
  std::vector<bf16> out16(x.size());
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  rmsnorm_forward_bf16(out16.data(), rstd16.data(), x.data(), w.data(), N, C, 1e-5f);
  EXPECT_EQ(out16, rounded(out));
  EXPECT_EQ(rstd16, rstd);
}

TEST(LlamaKernelsBf16, SwigluOutputsAreTheRoundedFp32Outputs) {
  const int N = 10, F = 100;
  Buf gu = random_normal(size_t(N) * 2 * F, 33, 4.0f), dout = random_normal(size_t(N) * F, 35);
  gu[0] = 200.0f, gu[1] = -200.0f, gu[2] = 0.0f;  // sigmoid's saturated ends and its middle
  Buf out(size_t(N) * F), dgu(gu.size(), 7.0f);   // overwritten, whatever it held
  swiglu_forward(out.data(), gu.data(), N, F);
  swiglu_backward(dgu.data(), gu.data(), dout.data(), N, F, /*accumulate=*/false);
  std::vector<bf16> out16(out.size()), dgu16(dgu.size());
  swiglu_forward_bf16(out16.data(), gu.data(), N, F);
  swiglu_backward_bf16(dgu16.data(), gu.data(), dout.data(), N, F);
  EXPECT_EQ(out16, rounded(out));
  EXPECT_EQ(dgu16, rounded(dgu));
  EXPECT_LT(std::abs(out[1]), 1e-30f) << "silu(-200) is a tiny number, not NaN";
}

TEST(LlamaKernels, SwigluBackwardOverwritesOrAccumulates) {
  const int N = 5, F = 10;
  const Buf gu = random_normal(size_t(N) * 2 * F, 36), dout = random_normal(size_t(N) * F, 38);
  Buf once(gu.size(), 0.0f), over(gu.size(), 5.0f), twice(gu.size(), 0.0f);
  swiglu_backward(once.data(), gu.data(), dout.data(), N, F, true);
  swiglu_backward(over.data(), gu.data(), dout.data(), N, F, false);
  EXPECT_EQ(over, once);
  swiglu_backward(twice.data(), gu.data(), dout.data(), N, F, true);
  swiglu_backward(twice.data(), gu.data(), dout.data(), N, F, true);
  for (size_t i = 0; i < gu.size(); i++) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
}

TEST(RopeTable, HoldsTheContractsAnglesInFp32) {
  const int hd = 16, P = 40;
  const double theta = 500000.0;
  const RopeTable t(hd, P, theta);
  for (int p = 0; p < P; p++)
    for (int i = 0; i < hd / 2; i++) {
      const double angle = p * std::pow(theta, -2.0 * i / hd);
      ASSERT_EQ(t.cos(p)[i], float(std::cos(angle))) << p << " " << i;
      ASSERT_EQ(t.sin(p)[i], float(std::sin(angle))) << p << " " << i;
    }
}

TEST(RopeTable, Llama31ScalingKeepsShortWavelengthsAndSlowsLongOnes) {
  // Llama 3.1 8B: theta 500000, hd 128, factor 8, low 1, high 4, original 8192. Reference values
  // from Hugging Face's _compute_llama3_parameters, evaluated in double by hand:
  // i = 0 is kept (wavelength 2 pi < 2048), i = 63 is divided by 8 (wavelength > 8192), and
  // i = 32 (wavelength 2 pi * 500000^(64/128) ~ 4.4e3) lies in the smoothed band.
  RopeScaling s;
  s.factor = 8, s.low_freq_factor = 1, s.high_freq_factor = 4, s.original_max_position = 8192;
  const std::vector<double> plain = rope_inv_freq(128, 500000.0),
                            scaled = rope_inv_freq(128, 500000.0, s);
  EXPECT_EQ(scaled[0], plain[0]);
  EXPECT_DOUBLE_EQ(scaled[63], plain[63] / 8);
  const double wavelen = 2 * M_PI / plain[32];
  ASSERT_GT(wavelen, 2048.0);
  ASSERT_LT(wavelen, 8192.0);
  const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
  EXPECT_DOUBLE_EQ(scaled[32], (1 - smooth) * plain[32] / 8 + smooth * plain[32]);
  EXPECT_LT(scaled[32], plain[32]);
  EXPECT_GT(scaled[32], plain[32] / 8);
}

TEST(Rope, RotationKeepsNormsAndItsBackwardUndoesIt) {
  const int rows = 12, T = 12, heads = 2, hd = 32;
  const RopeTable t(hd, T, 10000.0);
  const Buf x = random_normal(size_t(rows) * heads * hd, 39);
  Buf y = x;
  rope_forward(y.data(), rows, size_t(heads) * hd, heads, T, nullptr, t);
  // Position 0 is the identity; a rotation keeps each (i, i + half) pair's length.
  for (int c = 0; c < heads * hd; c++) EXPECT_EQ(y[c], x[c]);
  for (size_t r = 1; r < size_t(rows); r++)
    for (int i = 0; i < hd / 2; i++) {
      const size_t a = r * heads * hd + i, b = a + hd / 2;
      EXPECT_NEAR(std::hypot(y[a], y[b]), std::hypot(x[a], x[b]), 1e-5);
    }
  rope_backward(y.data(), rows, size_t(heads) * hd, heads, T, nullptr, t);
  EXPECT_LT(normalised_error(y, x), 1e-6);
}

}  // namespace
}  // namespace mt::test
