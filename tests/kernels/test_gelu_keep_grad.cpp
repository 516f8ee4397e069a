// The GELU forwards that keep the derivative in pre's place (kernels/gelu.h, keep_grad) and
// the backward that multiplies by it: the forward's output must equal the kernels that keep
// pre (fp32, and bf16 with and without the bias), and the kept derivative times dout must
// equal gelu_backward's overwriting product and gelu_backward_bf16's rounding of it, bit for
// bit, with tails, a NaN and a denormal-producing value in a row, on one and two threads.
// The GPT block's fp32 and bf16 MLPs (off the AMX tiles) now run these kernels, so a
// derivative computed otherwise than gelu_backward's would move every loss after step 1.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/gelu.h"
#include "kernels/kernel_harness.h"

namespace mt::test {
namespace {

std::vector<bf16> rounded(const Buf& v) {
  std::vector<bf16> r(v.size());
  to_bf16(r.data(), v.data(), v.size());
  return r;
}

std::vector<uint32_t> bits(const Buf& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// A negative NaN in row r at `at`, and beside it a value whose GELU is denormal.
void plant_specials(Buf& pre, int OC, int r, int at) {
  const size_t i = size_t(r) * OC + at;
  uint32_t negative_nan = 0xFFC00001u;
  std::memcpy(&pre[i], &negative_nan, sizeof(float));
  pre[i + 1 < pre.size() ? i + 1 : i - 1] = 2e-38f;
}

struct Want {
  Buf out, sum, dinp;  // gelu(pre + bias), pre + bias, gelu'(pre + bias) * dout
};

Want reference(const Buf& pre, const Buf& bias, const Buf& dout, int N, int OC) {
  Want w{Buf(pre.size()), pre, dout};
  bias_gelu_forward(w.out.data(), w.sum.data(), bias.data(), N, OC);
  gelu_backward(w.dinp.data(), w.sum.data(), w.dinp.data(), pre.size());
  return w;
}

TEST(GeluKeepGrad, Fp32ForwardAndBackwardEqualTheKernelsThatKeepPre) {
  const int N = 7, OC = 100;  // six vectors and a tail of 4 per row
  for (int at : {0, 40, 97})
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      Buf pre = random_normal(size_t(N) * OC, 71, 3.0f), bias = random_normal(OC, 72);
      const Buf dout = random_normal(pre.size(), 73);
      plant_specials(pre, OC, 4, at);
      const Want want = reference(pre, bias, dout, N, OC);
      Buf kept = pre, out(pre.size(), 7.f), dinp = dout;
      bias_gelu_forward_keep_grad(out.data(), kept.data(), bias.data(), N, OC);
      EXPECT_EQ(bits(out), bits(want.out)) << "special at " << at << ", " << threads;
      gelu_backward_kept(dinp.data(), kept.data(), dinp.data(), pre.size());
      EXPECT_EQ(bits(dinp), bits(want.dinp)) << "special at " << at << ", " << threads;
    }
  omp_set_num_threads(1);
}

TEST(GeluKeepGrad, Bf16ForwardsAndBackwardEqualTheKernelsThatKeepPre) {
  const int N = 7, OC = 100;
  for (int at : {0, 40, 97})
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      Buf pre = random_normal(size_t(N) * OC, 81, 3.0f), bias = random_normal(OC, 82);
      const Buf dout = random_normal(pre.size(), 83);
      plant_specials(pre, OC, 2, at);
      const Want want = reference(pre, bias, dout, N, OC);
      const std::vector<bf16> want_out = rounded(want.out), want_dinp = rounded(want.dinp);
      // With the bias in the pass (the gemm routine) and with the sum in pre already.
      Buf kept = pre, kept_sum = want.sum;
      std::vector<bf16> out(pre.size(), bf16(0x1234)), out_sum(pre.size(), bf16(0x1234));
      bias_gelu_forward_keep_grad_bf16(out.data(), kept.data(), bias.data(), N, OC);
      gelu_forward_keep_grad_bf16(out_sum.data(), kept_sum.data(), pre.size());
      EXPECT_EQ(out, want_out) << "with the bias, special at " << at << ", " << threads;
      EXPECT_EQ(out_sum, want_out) << "sum kept, special at " << at << ", " << threads;
      EXPECT_EQ(bits(kept), bits(kept_sum));
      std::vector<bf16> dinp(pre.size(), bf16(0x1234));
      gelu_backward_kept_bf16(dinp.data(), kept.data(), dout.data(), pre.size());
      EXPECT_EQ(dinp, want_dinp) << "special at " << at << ", " << threads;
    }
  omp_set_num_threads(1);
}

// The blocks of 4096 values of the unbiased forward and the backward on two threads, the
// special values in the second block and a tail in the last.
TEST(GeluKeepGrad, Bf16BlocksSeamsOnTwoThreads) {
  const size_t n = 3 * 4096 + 21;
  Buf pre = random_normal(n, 91, 3.0f);
  const Buf dout = random_normal(n, 92);
  plant_specials(pre, 1, 4096 + 700, 0);
  const Want want = reference(pre, Buf(n, 0.f), dout, 1, int(n));
  omp_set_num_threads(2);
  Buf kept = pre;
  std::vector<bf16> out(n, bf16(0x1234)), dinp(n, bf16(0x1234));
  gelu_forward_keep_grad_bf16(out.data(), kept.data(), n);
  gelu_backward_kept_bf16(dinp.data(), kept.data(), dout.data(), n);
  omp_set_num_threads(1);
  EXPECT_EQ(out, rounded(want.out));
  EXPECT_EQ(dinp, rounded(want.dinp));
}

}  // namespace
}  // namespace mt::test
