// The bf16 GELU kernels round each row (or block of 4096 values) with the conversion
// instruction and test for a NaN or a denormal once per row, storing a row that holds one
// again with the integer rule (kernels/gelu.cpp, store_row_bf16). A special value anywhere
// in a row (its first vector, its middle, its tail) must leave every value of that row and
// of the others to_bf16 of the fp32 kernel's, on one and two threads. Without the second
// store the conversion instruction would flush the denormal and keep the NaN's sign.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <limits>
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

// pre's row r gets a negative NaN at `at` and, next to it, a value whose GELU is denormal.
void plant_specials(Buf& pre, int OC, int r, int at) {
  const size_t i = size_t(r) * OC + at;
  uint32_t negative_nan = 0xFFC00001u;
  std::memcpy(&pre[i], &negative_nan, sizeof(float));
  pre[i + 1 < pre.size() ? i + 1 : i - 1] = 2e-38f;  // gelu(x) ~ x / 2: denormal
}

TEST(Bf16GeluRows, ASpecialValueAnywhereKeepsEveryRowsBits) {
  const int N = 6, OC = 100;  // six vectors and a tail of 4 per row
  for (int at : {0, 40, 97})
    for (int threads : {1, 2}) {
      Buf pre = random_normal(size_t(N) * OC, 61, 3.0f), bias(OC, 0.0f);
      const Buf dout = random_normal(pre.size(), 62);
      plant_specials(pre, OC, 3, at);
      omp_set_num_threads(threads);
      Buf pre32 = pre, out32(pre.size()), pre16 = pre;
      bias_gelu_forward(out32.data(), pre32.data(), bias.data(), N, OC);
      const std::vector<bf16> want = rounded(out32);
      std::vector<bf16> got(pre.size(), bf16(0x1234));
      bias_gelu_forward_bf16(got.data(), pre16.data(), bias.data(), N, OC);
      EXPECT_EQ(got, want) << "bias_gelu_forward_bf16, special at " << at << ", " << threads;
      std::fill(got.begin(), got.end(), bf16(0x1234));
      gelu_forward_bf16(got.data(), pre32.data(), pre.size());
      EXPECT_EQ(got, want) << "gelu_forward_bf16, special at " << at << ", " << threads;

      Buf d32 = dout;
      gelu_backward(d32.data(), pre32.data(), d32.data(), pre.size());
      std::fill(got.begin(), got.end(), bf16(0x1234));
      gelu_backward_bf16(got.data(), pre32.data(), dout.data(), pre.size());
      EXPECT_EQ(got, rounded(d32)) << "gelu_backward_bf16, special at " << at << ", " << threads;
    }
  omp_set_num_threads(1);
}

// The backward's blocks of 4096 values on two threads, the special value in the second block.
TEST(Bf16GeluRows, BackwardBlocksSeamsAndSpecialsOnTwoThreads) {
  const size_t n = 3 * 4096 + 21;
  Buf pre = random_normal(n, 63, 3.0f);
  const Buf dout = random_normal(n, 64);
  plant_specials(pre, 1, 4096 + 700, 0);
  Buf d32 = dout;
  gelu_backward(d32.data(), pre.data(), d32.data(), n);
  std::vector<bf16> got(n, bf16(0x1234));
  omp_set_num_threads(2);
  gelu_backward_bf16(got.data(), pre.data(), dout.data(), n);
  omp_set_num_threads(1);
  EXPECT_EQ(got, rounded(d32));
}

}  // namespace
}  // namespace mt::test
