// The bf16 GEMM paths of kernels/matmul_bf16.h beside one another: which routine each product
// of the mixed path (stop 42) runs on, and where it is the default. The bounds every path is
// held to are test_bf16.cpp's.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/bf16.h"
#include "kernels/kernel_harness.h"
#include "kernels/matmul_bf16.h"

namespace mt::test {
namespace {

// The mixed path (the default on AVX512-BF16 without AMX) runs a forward with a bias on the
// primitive, bias in its epilogue, and every other product on the gemm routine: each call's
// bits are one routine's. The routines' bits differ at this shape (checked first: on the
// AVX512-BF16 EPYC they agree up to K 256 and differ from K 512 on), so a product sent to
// the other routine shows.
TEST(Bf16Matmul, MixedRunsForwardsWithABiasOnThePrimitiveAndTheRestOnTheRoutine) {
  if (!bf16_matmul_supported() || !matmul_bf16_path_available(Bf16GemmPath::mixed))
    GTEST_SKIP() << "no oneDNN gemm routine here: the mixed path needs it";
  const int N = 512, C = 768, OC = 640;  // K = C, OC, N: every product sums 512 or more
  const std::vector<bf16> x = to_bf16_vec(random_normal(size_t(N) * C, 61)),
                          w = to_bf16_vec(random_normal(size_t(OC) * C, 62)),
                          dy = to_bf16_vec(random_normal(size_t(N) * OC, 63));
  const Buf bias = random_normal(OC, 64);
  struct Products {
    Buf fwd_bias, fwd, din, dw, db;
  };
  auto run = [&](Bf16GemmPath path) {
    const ScopedBf16GemmPath use(path);
    Products p{Buf(size_t(N) * OC), Buf(size_t(N) * OC), Buf(size_t(N) * C),
               Buf(size_t(OC) * C, 0.5f), Buf(OC, 0.25f)};
    matmul_bf16_forward(p.fwd_bias.data(), x.data(), w.data(), bias.data(), N, C, OC);
    matmul_bf16_forward(p.fwd.data(), x.data(), w.data(), nullptr, N, C, OC);
    matmul_bf16_backward_input(p.din.data(), dy.data(), w.data(), N, C, OC, false);
    matmul_bf16_backward_weight(p.dw.data(), p.db.data(), dy.data(), x.data(), N, C, OC);
    return p;
  };
  const Products prim = run(Bf16GemmPath::primitive), jit = run(Bf16GemmPath::jit_gemm);
  ASSERT_NE(prim.fwd_bias, jit.fwd_bias) << "the routines agree here: the test cannot tell them";
  ASSERT_NE(prim.fwd, jit.fwd);
  ASSERT_NE(prim.din, jit.din);
  ASSERT_NE(prim.dw, jit.dw);
  const size_t before = matmul_bf16_cached_primitives();
  const Products mixed = run(Bf16GemmPath::mixed);
  EXPECT_EQ(mixed.fwd_bias, prim.fwd_bias);
  EXPECT_EQ(mixed.fwd, jit.fwd);
  EXPECT_EQ(mixed.din, jit.din);
  EXPECT_EQ(mixed.dw, jit.dw);
  EXPECT_EQ(mixed.db, jit.db);
  // The primitive it ran was the one built above for the same shape: none new.
  EXPECT_EQ(matmul_bf16_cached_primitives(), before);
  EXPECT_TRUE(matmul_bf16_bias_on_primitive());
  const ScopedBf16GemmPath jit_only(Bf16GemmPath::jit_gemm);
  EXPECT_FALSE(matmul_bf16_bias_on_primitive());
}

// The default where the gemm routine runs: the mixed path on AVX512-BF16 without AMX.
TEST(Bf16Matmul, DefaultOnAvx512Bf16WithoutAmxIsTheMixedPath) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU (needs AVX-512)";
  const ScopedBf16GemmPath probe(Bf16GemmPath::primitive);
  if (matmul_bf16_isa() != "brg:avx512_core_bf16" ||
      !matmul_bf16_path_available(Bf16GemmPath::jit_gemm))
    GTEST_SKIP() << "not an AVX512-BF16 CPU without AMX: the primitive is the default";
  EXPECT_EQ(matmul_bf16_default_path(), Bf16GemmPath::mixed);
}

}  // namespace
}  // namespace mt::test
