// Flash attention's AMX tiles (kernels/flash_attention_amx.cpp) against its AVX512-BF16 tiles
// (FlashAttention::amx = false, the fallback) on the same inputs: the Llama block's bf16 core,
// with grouped-query heads, RoPE, zigzag ring positions and --dropout. Both paths multiply the
// same bf16 operands and differ only in the order of their fp32 sums (and the rare bf16
// rounding of P that order flips), so they agree to ~1e-4 of the values or better; a product, a mask
// bit or a head mapping gone wrong moves them by whole percents. Their agreement with fp32
// within the propagated bound is FlashAttentionBf16's (both paths run there).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "kernels/flash_attention.h"
#include "kernels/flash_test_setup.h"
#include "kernels/kernel_harness.h"

namespace mt::test {
namespace {

class FlashAttentionAmx : public ::testing::TestWithParam<FlashProblem> {};

TEST_P(FlashAttentionAmx, AgreesWithTheAvx512Bf16Tiles) {
  FlashProblem amx = GetParam(), avx = amx;
  amx.precision = avx.precision = FlashPrecision::bf16;
  avx.amx = false;
  const FlashSetup s_amx(amx), s_avx(avx);
  const Bufs in = s_amx.inputs(41);
  if (std::string(flash_attention_path(s_amx.args(in))) != "amx-bf16")
    GTEST_SKIP() << "no AMX tiles on this CPU";
  ASSERT_EQ(std::string(flash_attention_path(s_avx.args(in))), "avx512-bf16");
  const Buf dout = random_normal(s_amx.out_size(), 42);
  const Result r_amx = forward_fast(s_amx, in), r_avx = forward_fast(s_avx, in);
  const Bufs g_amx = backward_fast(s_amx, in, r_amx, dout),
             g_avx = backward_fast(s_avx, in, r_avx, dout);
  const double eo = normalised_error(r_amx.out, r_avx.out),
               el = normalised_error(r_amx.lse, r_avx.lse);
  double eg = 0;
  for (size_t i = 0; i < g_amx.size(); i++) eg = std::max(eg, normalised_error(g_amx[i], g_avx[i]));
  std::printf("amx against avx512-bf16: out %.2e lse %.2e grads %.2e\n", eo, el, eg);
  EXPECT_LT(eo, 3e-4);
  EXPECT_LT(el, 3e-4);
  EXPECT_LT(eg, 3e-4);
}

FlashProblem with_dropout(FlashProblem p, float rate, int head_offset) {
  p.name += "_dropout";
  p.dropout = rate, p.head_offset = head_offset;
  return p;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashAttentionAmx,
    ::testing::Values(
        problem("T100_gqa2_hd64", 1, 4, 2, 64, contiguous(100), contiguous(100), false, false),
        problem("T70_mqa_hd128_rope", 2, 2, 1, 128, contiguous(70), contiguous(70), true, false),
        problem("T45_gqa8_hd32_fused", 1, 8, 1, 32, contiguous(45), contiguous(45), false, true),
        problem("T130_hd32_rope", 2, 4, 4, 32, contiguous(130), contiguous(130), true, false),
        problem("cp4_step", 2, 4, 2, 64, zigzag(128, 4, 3), zigzag(128, 4, 1), false, false),
        with_dropout(problem("T77_gqa2_hd64_rope", 2, 4, 2, 64, contiguous(77), contiguous(77),
                             true, false),
                     0.2f, 0),
        with_dropout(problem("cp2_hd32", 1, 4, 2, 32, zigzag(96, 2, 1), zigzag(96, 2, 0), false,
                             false),
                     0.3f, 4)),
    [](const ::testing::TestParamInfo<FlashProblem>& info) { return info.param.name; });

}  // namespace
}  // namespace mt::test
