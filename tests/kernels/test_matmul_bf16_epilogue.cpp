// The bf16 GEMM with the residual add in its epilogue (matmul_bf16_forward_residual: a oneDNN
// binary post-op on the primitive path, the residual written first on the jit_gemm path)
// against the unfused composition the blocks ran before: matmul_bf16_forward, then
// add_inplace. Both routines, with and without a bias, at row counts that run as one piece
// and as several (matmul_bf16_row_pieces), so each piece must read its own residual rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/kernel_harness.h"
#include "kernels/matmul_bf16.h"
#include "kernels/reduce.h"

namespace mt::test {
namespace {

std::vector<bf16> rounded16(const Buf& x) {
  std::vector<bf16> out(x.size());
  to_bf16(out.data(), x.data(), x.size());
  return out;
}

const char* routine_name(Bf16GemmPath path) {
  return path == Bf16GemmPath::primitive ? "primitive" : "jit_gemm";
}

// The same products, the same rounded inputs: the fused and unfused results differ at most
// by the order of the three fp32 additions (product, bias, residual) in the epilogue, a few
// fp32 roundings of the largest term.
void expect_fused_equals_unfused(int N, int C, int OC, bool with_bias) {
  const std::vector<bf16> x = rounded16(random_normal(size_t(N) * C, 1)),
                          w = rounded16(random_normal(size_t(OC) * C, 2));
  const Buf bias = random_normal(OC, 3);
  Buf residual = random_normal(size_t(N) * OC, 4, 10.0f);
  for (size_t i = 0; i < residual.size(); i += 7) residual[i] += 300.0f;  // a residual to miss
  const float* b = with_bias ? bias.data() : nullptr;

  Buf want(size_t(N) * OC);
  matmul_bf16_forward(want.data(), x.data(), w.data(), b, N, C, OC);
  add_inplace(want.data(), residual.data(), want.size());
  Buf got(want.size(), -1.0f);
  matmul_bf16_forward_residual(got.data(), x.data(), w.data(), b, residual.data(), N, C, OC);
  for (size_t i = 0; i < want.size(); ++i) {
    const float scale = std::abs(want[i]) + std::abs(residual[i]) + 1.0f;
    ASSERT_NEAR(got[i], want[i], 4e-7 * scale) << "row " << i / OC << " column " << i % OC;
  }
}

TEST(Bf16Matmul, ResidualEpilogueEqualsGemmThenAdd) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  for (const Bf16GemmPath path : {Bf16GemmPath::primitive, Bf16GemmPath::jit_gemm}) {
    if (!matmul_bf16_path_available(path)) continue;
    SCOPED_TRACE(routine_name(path));
    const ScopedBf16GemmPath use(path);
    // 128 rows: one piece; 70 = 64 + 4 + 2: three pieces; 5: a small one.
    for (const int N : {128, 70, 5})
      for (const bool with_bias : {true, false}) {
        SCOPED_TRACE(testing::Message() << "N " << N << " bias " << with_bias);
        expect_fused_equals_unfused(N, 96, 48, with_bias);
      }
  }
  if (!matmul_bf16_path_available(Bf16GemmPath::jit_gemm))
    GTEST_SKIP() << "jit_gemm not available: the primitive path alone was checked";
}

TEST(Bf16Matmul, ResidualEpilogueOfAnEmptyProductIsBiasPlusResidual) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  const int N = 3, OC = 5;
  const Buf bias = random_normal(OC, 1), residual = random_normal(size_t(N) * OC, 2);
  const std::vector<bf16> none(1);
  Buf out(size_t(N) * OC, 7.0f);
  matmul_bf16_forward_residual(out.data(), none.data(), none.data(), bias.data(), residual.data(),
                               N, 0, OC);
  for (int r = 0; r < N; ++r)
    for (int o = 0; o < OC; ++o)
      EXPECT_EQ(out[size_t(r) * OC + o], bias[o] + residual[size_t(r) * OC + o]);
}

}  // namespace
}  // namespace mt::test
