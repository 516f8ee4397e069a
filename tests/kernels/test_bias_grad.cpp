// A linear layer's bias gradient (bias_grad_add, kernels/bias_grad.h): each column of dout
// summed from 0 over the rows in order, then added to dbias. The row-streaming layout must
// give the bits of that order at every thread count, for fp32 and bf16 dout, through the
// four-row passes' tail (N not a multiple of 4), a partial vector (OC not a multiple of 16)
// and the column chunks (OC over 2048). The values span many magnitudes so that any other
// order of the sum gives other bits somewhere (checked: the reversed order does).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bias_grad.h"
#include "kernels/kernel_harness.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"

namespace mt::test {
namespace {

// Normal values times e^(3 z): sums whose rounding depends on the order.
Buf spread_values(size_t n, unsigned seed) {
  Buf v = random_normal(n, seed), z = random_normal(n, seed + 1);
  for (size_t i = 0; i < n; i++) v[i] *= std::exp(3.0f * z[i]);
  return v;
}

// The order the contract names, one column at a time; reversed: the rows from the last.
Buf ordered_sums(const Buf& start, const Buf& dout, int N, int OC, bool reversed = false) {
  Buf out = start;
  for (int o = 0; o < OC; o++) {
    float acc = 0.0f;
    for (int i = 0; i < N; i++) acc += dout[size_t(reversed ? N - 1 - i : i) * OC + o];
    out[o] += acc;
  }
  return out;
}

size_t bit_mismatches(const Buf& a, const Buf& b) {
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); i++) bad += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return bad;
}

const int kShapes[][2] = {{1, 5}, {7, 13}, {64, 384}, {257, 1000}, {130, 5000}};

TEST(BiasGrad, EqualsRowOrderColumnSumsBitwise) {
  for (const auto& [N, OC] : kShapes) {
    const Buf dout = spread_values(size_t(N) * OC, 11), start = random_normal(OC, 12);
    std::vector<bf16> dout16(dout.size());
    to_bf16(dout16.data(), dout.data(), dout.size());
    Buf dout_rounded(dout.size());
    for (size_t i = 0; i < dout.size(); i++) dout_rounded[i] = bf16_to_float(dout16[i]);
    const Buf want = ordered_sums(start, dout, N, OC),
              want16 = ordered_sums(start, dout_rounded, N, OC);
    if (N >= 64) {  // the data tells the orders apart, so the comparison below can fail
      EXPECT_GT(bit_mismatches(ordered_sums(start, dout, N, OC, true), want), 0u);
    }
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      const std::string at = "N " + std::to_string(N) + " OC " + std::to_string(OC) + " threads " +
                             std::to_string(threads);
      Buf got = start;
      bias_grad_add(got.data(), dout.data(), N, OC);
      EXPECT_EQ(bit_mismatches(got, want), 0u) << "fp32 dout, " << at;
      Buf got16 = start;
      bias_grad_add(got16.data(), dout16.data(), N, OC);
      EXPECT_EQ(bit_mismatches(got16, want16), 0u) << "bf16 dout, " << at;
    }
  }
  omp_set_num_threads(1);
}

// The linear layers' weight-gradient routines sum their bias through it.
TEST(BiasGrad, LinearWeightGradientsSumTheirBiasInRowOrder) {
  const int N = 70, C = 24, OC = 48;
  const Buf dout = spread_values(size_t(N) * OC, 21), inp = random_normal(size_t(N) * C, 22);
  const Buf start = random_normal(OC, 23);
  Buf dw(size_t(OC) * C, 0.0f), db = start;
  matmul_backward_weight(dw.data(), db.data(), dout.data(), inp.data(), N, C, OC);
  EXPECT_EQ(bit_mismatches(db, ordered_sums(start, dout, N, OC)), 0u) << "fp32";

  std::vector<bf16> dout16(dout.size()), inp16(inp.size());
  to_bf16(dout16.data(), dout.data(), dout.size());
  to_bf16(inp16.data(), inp.data(), inp.size());
  Buf rounded(dout.size());
  for (size_t i = 0; i < dout.size(); i++) rounded[i] = bf16_to_float(dout16[i]);
  Buf db16 = start;
  matmul_bf16_backward_weight(dw.data(), db16.data(), dout16.data(), inp16.data(), N, C, OC);
  EXPECT_EQ(bit_mismatches(db16, ordered_sums(start, rounded, N, OC)), 0u) << "bf16";
}

}  // namespace
}  // namespace mt::test
