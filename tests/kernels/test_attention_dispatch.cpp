// The attention core's dispatch over a CPU's kernels (kernels/attention.h, AttentionIsa):
// attention_kernel is attention_kernel_on this CPU's kernels; the head-dim rules a local plan
// applies to its profile's CPU (model/kernel_target.h) are this CPU's own predicates wherever
// it has the kernel; ScopedAttentionIsa stands in for another CPU.
#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "kernels/attention_amx.h"
#include "kernels/attention_avx512.h"
#include "kernels/attention_bf16_avx512.h"
#include "kernels/attention_bf16_batched.h"

namespace mt {
namespace {

TEST(AttentionDispatch, HeadDimRulesAreThisCpusPredicates) {
  const AttentionIsa here = attention_isa();
  for (int hd = 1; hd <= 256; ++hd) {
    if (here.fp32_tiles)
      EXPECT_EQ(attention_avx512_supports(hd), attention_tiles_head_dim(hd)) << hd;
    if (here.bf16_tiles)
      EXPECT_EQ(attention_bf16_avx512_supports(hd), attention_tiles_head_dim(hd)) << hd;
    if (here.amx_tiles) EXPECT_EQ(attention_amx_supports(hd), attention_amx_head_dim(hd)) << hd;
    if (here.amx_batched)
      EXPECT_EQ(attention_bf16_batched_supports(hd), attention_batched_head_dim(hd)) << hd;
    for (const bool bf16 : {false, true})
      EXPECT_EQ(attention_kernel(bf16, 2 * hd, 2), attention_kernel_on(here, bf16, 2 * hd, 2))
          << hd;
  }
}

TEST(AttentionDispatch, TheProfileFieldsBitsRoundTrip) {
  for (int b = 0; b < 16; ++b) EXPECT_EQ(AttentionIsa::from_bits(b).bits(), b);
}

TEST(AttentionDispatch, ScopedIsaStandsInForAnotherCpu) {
  {
    const ScopedAttentionIsa none(AttentionIsa{});
    EXPECT_EQ(attention_kernel(false, 256, 8), AttentionKernel::fp32_sgemm);
    EXPECT_EQ(attention_saved_form(true, 256, 8), AttentionSaved::probabilities);
    EXPECT_EQ(attention_backward_scratch_floats(2, 16, 256, 8, true), size_t(2) * 8 * 16 * 16);
  }
  {
    const ScopedAttentionIsa amx(AttentionIsa::from_bits(15));
    EXPECT_EQ(attention_kernel(true, 256, 8), AttentionKernel::bf16_amx_tiles);  // hd 32
    EXPECT_EQ(attention_kernel(true, 256, 16), AttentionKernel::bf16_avx512);    // hd 16
    EXPECT_EQ(attention_kernel(true, 256, 4, AmxTiles::forbid), AttentionKernel::bf16_amx);
    EXPECT_EQ(attention_kernel(false, 256, 8), AttentionKernel::fp32_avx512);
    EXPECT_EQ(attention_kernel(true, 240, 10), AttentionKernel::fp32_sgemm);  // hd 24
  }
  {
    const ScopedAttentionIsa avx512(AttentionIsa::from_bits(1));  // no AVX512-BF16
    EXPECT_EQ(attention_saved_form(true, 256, 8), AttentionSaved::row_stats);
  }
}

}  // namespace
}  // namespace mt
