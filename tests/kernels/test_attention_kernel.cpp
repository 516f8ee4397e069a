// Which attention core runs (kernels/attention.h attention_kernel): picked at run time from
// the CPU, the precision and the head dim, and named for the step breakdown. The results of
// each path are Bf16Attention's business (tests/kernels/test_bf16.cpp): its shapes with head
// dims 64 and 128 run the AMX path on AMX machines.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_amx.h"
#include "kernels/attention_avx512.h"
#include "kernels/attention_bf16_avx512.h"
#include "kernels/matmul_bf16.h"

namespace mt {
namespace {

bool bf16_gemms_on_amx() {
  return bf16_matmul_supported() && matmul_bf16_isa().find("amx") != std::string::npos;
}

// Without the hand-written AMX tiles (AmxTiles::forbid: the fallback), oneDNN's batched
// matmuls at head dims 64 and 128 where the GEMMs run on AMX.
TEST(AttentionKernel, Bf16TakesAmxForHeadDims64And128WhereTheGemmsRunOnAmx) {
  if (!bf16_gemms_on_amx()) GTEST_SKIP() << "the bf16 GEMMs do not run on AMX here";
  const AmxTiles no = AmxTiles::forbid;
  EXPECT_EQ(attention_kernel(true, 128, 2, no), AttentionKernel::bf16_amx);  // hd 64
  EXPECT_EQ(attention_kernel(true, 256, 2, no), AttentionKernel::bf16_amx);  // hd 128
  // hd 32: the AVX512-BF16 register tiles measured faster (attention_bf16_batched.cpp).
  EXPECT_EQ(attention_kernel(true, 64, 2, no), AttentionKernel::bf16_avx512);
  // Moved off the AMX primitive, the attention core follows the GEMMs.
  ScopedBf16GemmPath jit(Bf16GemmPath::jit_gemm);
  EXPECT_EQ(attention_kernel(true, 128, 2, no), AttentionKernel::bf16_avx512);
}

// With AMX granted, the hand-written tile kernel at head dims 32, 64 and 128, whatever the
// GEMMs' path; head dim 16 (half a tile step) keeps the register tiles, fp32 never takes it.
TEST(AttentionKernel, Bf16TakesTheAmxTilesWhereTheCpuHasAmx) {
  if (!attention_amx_supports(32)) GTEST_SKIP() << "no AMX tiles on this CPU";
  for (int hd : {32, 64, 128}) {
    EXPECT_EQ(attention_kernel(true, 2 * hd, 2), AttentionKernel::bf16_amx_tiles) << hd;
    EXPECT_NE(attention_kernel(true, 2 * hd, 2, AmxTiles::forbid), AttentionKernel::bf16_amx_tiles)
        << hd;
    EXPECT_NE(attention_kernel(false, 2 * hd, 2), AttentionKernel::bf16_amx_tiles) << hd;
  }
  EXPECT_EQ(attention_kernel(true, 32, 2), AttentionKernel::bf16_avx512);  // hd 16
  ScopedBf16GemmPath jit(Bf16GemmPath::jit_gemm);
  EXPECT_EQ(attention_kernel(true, 128, 2), AttentionKernel::bf16_amx_tiles);
}

TEST(AttentionKernel, Fp32NeverTakesABf16Kernel) {
  for (int hd : {16, 32, 48, 64, 128}) {
    const AttentionKernel k = attention_kernel(false, 2 * hd, 2);
    EXPECT_EQ(k, attention_avx512_supports(hd) ? AttentionKernel::fp32_avx512
                                               : AttentionKernel::fp32_sgemm)
        << hd;
  }
}

TEST(AttentionKernel, Bf16SupportedMeansABf16Kernel) {
  for (int hd : {16, 32, 48, 64, 128}) {
    const AttentionKernel k = attention_kernel(true, 2 * hd, 2);
    const bool bf16 = k == AttentionKernel::bf16_amx_tiles || k == AttentionKernel::bf16_amx ||
                      k == AttentionKernel::bf16_avx512;
    EXPECT_EQ(attention_bf16_supported(2 * hd, 2), bf16) << hd;
    if (!attention_bf16_avx512_supports(hd)) {
      EXPECT_FALSE(bf16) << hd;
    }
  }
}

TEST(AttentionKernel, EveryKernelHasAName) {
  for (AttentionKernel k :
       {AttentionKernel::bf16_amx_tiles, AttentionKernel::bf16_amx, AttentionKernel::bf16_avx512,
        AttentionKernel::fp32_avx512, AttentionKernel::fp32_sgemm})
    EXPECT_FALSE(std::string(attention_kernel_name(k)).empty());
  EXPECT_NE(std::string(attention_kernel_name(AttentionKernel::bf16_amx)).find("AMX"),
            std::string::npos);
  EXPECT_NE(
      std::string(attention_kernel_name(AttentionKernel::bf16_amx_tiles)).find("attention_amx"),
      std::string::npos);
}

// The AMX path against the AVX512-BF16 one on the same inputs (T 256 past the direct
// backward's 128 rows, an odd T): both are bf16 products of the same roundings, so they agree
// to bf16 accuracy and not bit for bit.
TEST(AttentionKernel, AmxPathAgreesWithTheRegisterTiles) {
  if (!bf16_gemms_on_amx()) GTEST_SKIP() << "the bf16 GEMMs do not run on AMX here";
  for (int T : {256, 77}) {
    const int B = 2, C = 128, NH = 2;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    std::vector<float> qkv(size_t(B) * T * 3 * C), g(size_t(B) * T * C);
    for (float& x : qkv) x = nd(rng);
    for (float& x : g) x = nd(rng);
    std::vector<float> out[2], att[2], dqkv[2],
        scratch(attention_backward_scratch_floats(B, T, C, NH));
    for (int path = 0; path < 2; ++path) {
      std::unique_ptr<ScopedBf16GemmPath> jit;
      if (path == 1) jit = std::make_unique<ScopedBf16GemmPath>(Bf16GemmPath::jit_gemm);
      const AmxTiles no = AmxTiles::forbid;  // the oneDNN batched kernel, not the tile kernel
      ASSERT_EQ(attention_kernel(true, C, NH, no),
                path == 0 ? AttentionKernel::bf16_amx : AttentionKernel::bf16_avx512);
      out[path].assign(g.size(), 0.0f), att[path].assign(size_t(B) * NH * T * T, 1.0f);
      dqkv[path].assign(qkv.size(), 0.0f);
      attention_forward_bf16(out[path].data(), att[path].data(), qkv.data(), B, T, C, NH, no);
      attention_backward_bf16(dqkv[path].data(), scratch.data(), g.data(), qkv.data(),
                              att[0].data(), B, T, C, NH, true, no);
    }
    auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
      double e = 0, n = 0;
      for (size_t i = 0; i < a.size(); ++i)
        e += double(a[i] - b[i]) * (a[i] - b[i]), n += double(b[i]) * b[i];
      return std::sqrt(e / n);
    };
    EXPECT_LT(rel(out[0], out[1]), 1e-2) << T;
    EXPECT_LT(rel(att[0], att[1]), 1e-2) << T;
    EXPECT_LT(rel(dqkv[0], dqkv[1]), 1e-2) << T;
    for (int bh = 0; bh < B * NH; ++bh)  // exact zeros above the diagonal
      for (int i = 0; i < T; ++i)
        for (int j = i + 1; j < T; ++j) ASSERT_EQ(att[0][(size_t(bh) * T + i) * T + j], 0.0f);
  }
}

}  // namespace
}  // namespace mt
