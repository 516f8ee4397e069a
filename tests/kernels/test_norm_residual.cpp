// The norms with the residual path folded in: the input gradient
// (layernorm_backward_input_residual, rmsnorm_backward_input_residual), a block's dx = dx_out +
// norm'(...) in one pass, must give the bits of the two passes it replaces (a copy of dx_out,
// then the accumulating kernel), at every thread count and in place; the forward
// (add_layernorm_forward, add_rmsnorm_forward and their bf16 forms), x += res and the norm of the
// sum in one pass, the bits of add_inplace followed by the norm. So the fp32 and bf16 steps stay
// bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernel_harness.h"
#include "kernels/layernorm.h"
#include "kernels/reduce.h"
#include "kernels/rmsnorm.h"

namespace mt::test {
namespace {

struct NormInputs {
  Buf x, w, b, dout, dres, out, mean, rstd;
};

NormInputs make_inputs(int N, int C, unsigned seed) {
  NormInputs in;
  in.x = random_normal(size_t(N) * C, seed, 2.0f);
  for (float& v : in.x) v += 1.5f;  // a non-zero mean
  in.w = random_normal(C, seed + 1);
  in.b = random_normal(C, seed + 2);
  in.dout = random_normal(size_t(N) * C, seed + 3);
  in.dres = random_normal(size_t(N) * C, seed + 4);
  in.out.resize(size_t(N) * C);
  in.mean.resize(N);
  in.rstd.resize(N);
  return in;
}

size_t bit_mismatches(const Buf& a, const Buf& b) {
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); i++) bad += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return bad;
}

const int kShapes[][2] = {{1, 3}, {7, 13}, {33, 256}, {5, 1000}};

TEST(NormResidualBackward, LayerNormEqualsCopyThenAccumulateBitwise) {
  for (const auto& [N, C] : kShapes)
    for (int threads : {1, 2}) {
      NormInputs in = make_inputs(N, C, 70);
      omp_set_num_threads(threads);
      layernorm_forward(in.out.data(), in.mean.data(), in.rstd.data(), in.x.data(), in.w.data(),
                        in.b.data(), N, C);
      Buf two_pass = in.dres;
      layernorm_backward_input(two_pass.data(), in.dout.data(), in.x.data(), in.w.data(),
                               in.mean.data(), in.rstd.data(), N, C);
      Buf fused(in.dres.size(), -7.0f);  // stale contents must not leak in
      layernorm_backward_input_residual(fused.data(), in.dres.data(), in.dout.data(), in.x.data(),
                                        in.w.data(), in.mean.data(), in.rstd.data(), N, C);
      EXPECT_EQ(bit_mismatches(fused, two_pass), 0u)
          << "N " << N << " C " << C << " threads " << threads;
      Buf in_place = in.dres;  // dinp == dres
      layernorm_backward_input_residual(in_place.data(), in_place.data(), in.dout.data(),
                                        in.x.data(), in.w.data(), in.mean.data(), in.rstd.data(), N,
                                        C);
      EXPECT_EQ(bit_mismatches(in_place, two_pass), 0u) << "in place, N " << N << " C " << C;
    }
  omp_set_num_threads(1);
}

TEST(NormResidualForward, LayerNormEqualsAddThenNormBitwise) {
  for (const auto& [N, C] : kShapes)
    for (int threads : {1, 2}) {
      NormInputs in = make_inputs(N, C, 90);
      // Column 0's outputs denormal: the bf16 rounding's path for them (kept, not flushed).
      in.w[0] = 1e-39f, in.b[0] = 0.0f;
      omp_set_num_threads(threads);
      const size_t n = size_t(N) * C;
      Buf sum_two = in.x, out_two(n), mean_two(N), rstd_two(N);
      add_inplace(sum_two.data(), in.dres.data(), n);
      layernorm_forward(out_two.data(), mean_two.data(), rstd_two.data(), sum_two.data(),
                        in.w.data(), in.b.data(), N, C);
      std::vector<bf16> want16(n), got16(n, bf16(0x1234));
      to_bf16(want16.data(), out_two.data(), n);

      Buf sum = in.x, out(n, -7.0f), mean(N, -7.0f), rstd(N, -7.0f);
      add_layernorm_forward(out.data(), mean.data(), rstd.data(), sum.data(), in.dres.data(),
                            in.w.data(), in.b.data(), N, C);
      const std::string at = "N " + std::to_string(N) + " C " + std::to_string(C) + " threads " +
                             std::to_string(threads);
      EXPECT_EQ(bit_mismatches(sum, sum_two), 0u) << "the sum, " << at;
      EXPECT_EQ(bit_mismatches(out, out_two), 0u) << "the output, " << at;
      EXPECT_EQ(bit_mismatches(mean, mean_two), 0u) << "the means, " << at;
      EXPECT_EQ(bit_mismatches(rstd, rstd_two), 0u) << "the rstds, " << at;

      Buf sum16 = in.x;
      add_layernorm_forward_bf16(got16.data(), mean.data(), rstd.data(), sum16.data(),
                                 in.dres.data(), in.w.data(), in.b.data(), N, C);
      EXPECT_EQ(bit_mismatches(sum16, sum_two), 0u) << "the bf16 form's sum, " << at;
      EXPECT_EQ(got16, want16) << "the bf16 output, " << at;
      EXPECT_EQ(bit_mismatches(rstd, rstd_two), 0u) << "the bf16 form's rstds, " << at;
    }
  omp_set_num_threads(1);
}

TEST(NormResidualForward, RmsNormEqualsAddThenNormBitwise) {
  for (const auto& [N, C] : kShapes)
    for (int threads : {1, 2}) {
      NormInputs in = make_inputs(N, C, 95);
      // The bf16 rows test for a NaN or a denormal once per row and store such a row again:
      // the last row's last output denormal, the middle row all NaN (a negative NaN input).
      const size_t last = size_t(N) * C - 1, mid = size_t(N / 2) * C;
      in.x[last] = 1e-39f, in.dres[last] = 0.0f, in.w[C - 1] = 0.5f;
      if (N > 2) in.x[mid] = -std::numeric_limits<float>::quiet_NaN();
      omp_set_num_threads(threads);
      const size_t n = size_t(N) * C;
      Buf sum_two = in.x, out_two(n), rstd_two(N);
      add_inplace(sum_two.data(), in.dres.data(), n);
      rmsnorm_forward(out_two.data(), rstd_two.data(), sum_two.data(), in.w.data(), N, C, 1e-5f);
      std::vector<bf16> want16(n), got16(n, bf16(0x1234));
      to_bf16(want16.data(), out_two.data(), n);

      Buf sum = in.x, out(n, -7.0f), rstd(N, -7.0f);
      add_rmsnorm_forward(out.data(), rstd.data(), sum.data(), in.dres.data(), in.w.data(), N, C,
                          1e-5f);
      const std::string at = "N " + std::to_string(N) + " C " + std::to_string(C) + " threads " +
                             std::to_string(threads);
      EXPECT_EQ(bit_mismatches(sum, sum_two), 0u) << "the sum, " << at;
      EXPECT_EQ(bit_mismatches(out, out_two), 0u) << "the output, " << at;
      EXPECT_EQ(bit_mismatches(rstd, rstd_two), 0u) << "the rstds, " << at;

      Buf sum16 = in.x, rstd16(N, -7.0f);
      add_rmsnorm_forward_bf16(got16.data(), rstd16.data(), sum16.data(), in.dres.data(),
                               in.w.data(), N, C, 1e-5f);
      EXPECT_EQ(bit_mismatches(sum16, sum_two), 0u) << "the bf16 form's sum, " << at;
      EXPECT_EQ(got16, want16) << "the bf16 output, " << at;
      EXPECT_EQ(bit_mismatches(rstd16, rstd_two), 0u) << "the bf16 form's rstds, " << at;
    }
  omp_set_num_threads(1);
}

TEST(NormResidualBackward, RmsNormEqualsCopyThenAccumulateBitwise) {
  for (const auto& [N, C] : kShapes)
    for (int threads : {1, 2}) {
      NormInputs in = make_inputs(N, C, 80);
      omp_set_num_threads(threads);
      rmsnorm_forward(in.out.data(), in.rstd.data(), in.x.data(), in.w.data(), N, C, 1e-5f);
      Buf two_pass = in.dres;
      rmsnorm_backward_input(two_pass.data(), in.dout.data(), in.x.data(), in.w.data(),
                             in.rstd.data(), N, C);
      Buf fused(in.dres.size(), -7.0f);
      rmsnorm_backward_input_residual(fused.data(), in.dres.data(), in.dout.data(), in.x.data(),
                                      in.w.data(), in.rstd.data(), N, C);
      EXPECT_EQ(bit_mismatches(fused, two_pass), 0u)
          << "N " << N << " C " << C << " threads " << threads;
      Buf in_place = in.dres;
      rmsnorm_backward_input_residual(in_place.data(), in_place.data(), in.dout.data(), in.x.data(),
                                      in.w.data(), in.rstd.data(), N, C);
      EXPECT_EQ(bit_mismatches(in_place, two_pass), 0u) << "in place, N " << N << " C " << C;
    }
  omp_set_num_threads(1);
}

// The bf16 copy written by the residual input gradient's row pass (the GPT block's dx_mid16)
// must be to_bf16 of the fp32 result bit for bit, and the fp32 result unchanged: rows holding
// a denormal (row 1: zero output gradient over a tiny residual gradient) and a NaN (row 2),
// which the conversion instruction rounds otherwise, at every thread count and in place.
TEST(NormResidualBackward, LayerNormBf16CopyIsToBf16OfTheResult) {
  for (const auto& [N, C] : kShapes)
    for (int threads : {1, 2}) {
      NormInputs in = make_inputs(N, C, 90);
      if (N > 1) {
        std::fill(in.dout.begin() + C, in.dout.begin() + 2 * C, 0.0f);
        std::fill(in.dres.begin() + C, in.dres.begin() + 2 * C, 1e-39f);
      }
      if (N > 2) in.dres[2 * size_t(C) + C / 2] = std::numeric_limits<float>::quiet_NaN();
      omp_set_num_threads(threads);
      layernorm_forward(in.out.data(), in.mean.data(), in.rstd.data(), in.x.data(), in.w.data(),
                        in.b.data(), N, C);
      Buf fp32(in.dres.size());
      layernorm_backward_input_residual(fp32.data(), in.dres.data(), in.dout.data(), in.x.data(),
                                        in.w.data(), in.mean.data(), in.rstd.data(), N, C);
      std::vector<bf16> want(fp32.size());
      to_bf16(want.data(), fp32.data(), fp32.size());
      for (bool in_place : {false, true}) {
        Buf fused = in_place ? in.dres : Buf(in.dres.size(), -7.0f);
        std::vector<bf16> got(fp32.size(), bf16(0x1234));
        layernorm_backward_input_residual_bf16(
            fused.data(), got.data(), in_place ? fused.data() : in.dres.data(), in.dout.data(),
            in.x.data(), in.w.data(), in.mean.data(), in.rstd.data(), N, C);
        const std::string at = std::string(in_place ? "in place, " : "") + "N " +
                               std::to_string(N) + " C " + std::to_string(C) + " threads " +
                               std::to_string(threads);
        EXPECT_EQ(bit_mismatches(fused, fp32), 0u) << at;
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); i++) bad += std::memcmp(&got[i], &want[i], 2) != 0;
        EXPECT_EQ(bad, 0u) << at;
      }
    }
  omp_set_num_threads(1);
}

// The overwriting input gradients (the head's final norm: no memset of dx first) give the bits
// of a memset followed by the accumulating kernel. Row 0's output gradient is zero, so with a
// negative weight and a positive xhat its gradient is -0, which 0 + (-0) turns into +0: a
// kernel storing the gradient itself, not 0 + it, differs there.
TEST(NormOverwriteBackward, EqualsMemsetThenAccumulateBitwise) {
  for (const auto& [N, C] : kShapes)
    for (int threads : {1, 2}) {
      NormInputs in = make_inputs(N, C, 110);
      std::fill(in.dout.begin(), in.dout.begin() + C, 0.0f);
      for (int c = 0; c < C; c += 2) in.w[c] = -std::abs(in.w[c]);
      omp_set_num_threads(threads);
      for (bool rms : {false, true}) {
        if (rms)
          rmsnorm_forward(in.out.data(), in.rstd.data(), in.x.data(), in.w.data(), N, C, 1e-5f);
        else
          layernorm_forward(in.out.data(), in.mean.data(), in.rstd.data(), in.x.data(), in.w.data(),
                            in.b.data(), N, C);
        Buf two_pass(in.dout.size(), 0.0f), fused(in.dout.size(), -7.0f);
        if (rms) {
          rmsnorm_backward_input(two_pass.data(), in.dout.data(), in.x.data(), in.w.data(),
                                 in.rstd.data(), N, C);
          rmsnorm_backward_input_overwrite(fused.data(), in.dout.data(), in.x.data(), in.w.data(),
                                           in.rstd.data(), N, C);
        } else {
          layernorm_backward_input(two_pass.data(), in.dout.data(), in.x.data(), in.w.data(),
                                   in.mean.data(), in.rstd.data(), N, C);
          layernorm_backward_input_overwrite(fused.data(), in.dout.data(), in.x.data(), in.w.data(),
                                             in.mean.data(), in.rstd.data(), N, C);
        }
        EXPECT_EQ(bit_mismatches(fused, two_pass), 0u) << (rms ? "rmsnorm" : "layernorm") << " N "
                                                       << N << " C " << C << " threads " << threads;
      }
    }
  omp_set_num_threads(1);
}

}  // namespace
}  // namespace mt::test
