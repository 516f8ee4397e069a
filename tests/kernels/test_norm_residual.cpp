// The norms' input gradient with the residual path folded in (layernorm_backward_input_residual,
// rmsnorm_backward_input_residual): a block's dx = dx_out + norm'(...) in one pass must give
// the bits of the two passes it replaces (a copy of dx_out, then the accumulating kernel), at
// every thread count and in place, so that the fp32 and bf16 steps stay bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>

#include "kernels/kernel_harness.h"
#include "kernels/layernorm.h"
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

}  // namespace
}  // namespace mt::test
