// Flash attention's bf16-output forms (--precision bf16 on one worker: the Llama block's core,
// and the GPT block's under --dropout), which write the output and the fused [q | k | v]
// gradients as bf16 where the block keeps them: bit for bit to_bf16 of the fp32 forms (the
// forward's overwrite; the backward's sum onto zeroed gradients), on every tile path, with
// grouped-query heads, RoPE, dropout and padded strides; nothing outside the heads' columns
// is written.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_test_setup.h"
#include "kernels/kernel_harness.h"

namespace mt::test {
namespace {

constexpr bf16 kGuard = 0x5555;  // what the kernel must leave alone

using Bf16s = std::vector<bf16>;

Bf16s rounded(const Buf& x) {
  Bf16s r(x.size());
  to_bf16(r.data(), x.data(), x.size());
  return r;
}

// Element (row, col) of every row's first `cols` columns equal; the rest still the guard.
void expect_rows(const Bf16s& got, const Bf16s& want, size_t ld, size_t cols, const char* what) {
  for (size_t i = 0; i < got.size(); i++) {
    if (i % ld < cols)
      ASSERT_EQ(got[i], want[i]) << what << " row " << i / ld << " column " << i % ld;
    else
      ASSERT_EQ(got[i], kGuard) << what << " wrote column " << i % ld << " past its heads";
  }
}

class FlashAttentionBf16Out : public ::testing::TestWithParam<FlashProblem> {};

TEST_P(FlashAttentionBf16Out, ForwardWritesTheRoundedFp32Output) {
  FlashProblem p = GetParam();
  p.precision = FlashPrecision::bf16;
  const FlashSetup s(p);
  const Bufs in = s.inputs(51);
  const FlashAttention a = s.args(in);
  const Result want = forward_fast(s, in);
  Bf16s out(s.out_size(), kGuard);
  Buf lse(s.lse_size(), 7.0f), scratch(flash_attention_forward_scratch_floats(a));
  flash_attention_forward(out.data(), s.ldo(), lse.data(), a, scratch);
  std::printf("path %s\n", flash_attention_path(a));
  expect_rows(out, rounded(want.out), s.ldo(), size_t(p.H) * p.hd, "out");
  EXPECT_EQ(lse, want.lse);
}

TEST_P(FlashAttentionBf16Out, BackwardOverwritesWithTheRoundedFp32Gradients) {
  FlashProblem p = GetParam();
  p.precision = FlashPrecision::bf16;
  const FlashSetup s(p);
  const Bufs in = s.inputs(61);
  const FlashAttention a = s.args(in);
  const Buf dout = random_normal(s.out_size(), 62);
  const Result r = forward_fast(s, in);
  const Bufs want = backward_fast(s, in, r, dout);  // summed onto zeros
  std::vector<Bf16s> got;
  for (const Buf& b : in) got.emplace_back(b.size(), kGuard);
  bf16* kv = p.fused ? got[0].data() + size_t(p.H) * p.hd : got[1].data();
  const FlashGradsBf16 g{got[0].data(), kv, kv + size_t(p.Hkv) * p.hd, s.ldq(), s.ldkv(), s.ldkv()};
  Buf D(s.lse_size()), scratch(flash_attention_backward_scratch_floats(a));
  flash_attention_backward_prep(D.data(), r.out.data(), s.ldo(), dout.data(), s.ldo(), p.B, s.Tq(),
                                p.H, p.hd);
  flash_attention_backward(g, dout.data(), s.ldo(), r.lse.data(), D.data(), a, scratch);
  const size_t kv_cols = 2 * size_t(p.Hkv) * p.hd;
  if (p.fused) {
    expect_rows(got[0], rounded(want[0]), s.ldq(), size_t(p.H) * p.hd + kv_cols, "dqkv");
  } else {
    expect_rows(got[0], rounded(want[0]), s.ldq(), size_t(p.H) * p.hd, "dq");
    expect_rows(got[1], rounded(want[1]), s.ldkv(), kv_cols, "dkv");
  }
}

FlashProblem on(FlashProblem p, const char* path) {
  p.name += std::string("_") + path;
  p.amx = std::string(path) != "avx512";
  p.portable = std::string(path) == "portable";
  return p;
}

FlashProblem with_dropout(FlashProblem p, float rate) {
  p.name += "_dropout";
  p.dropout = rate;
  return p;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashAttentionBf16Out,
    ::testing::Values(
        on(problem("T100_gqa2_hd64_fused", 1, 4, 2, 64, contiguous(100), contiguous(100), true,
                   true),
           "amx"),
        on(problem("T130_hd32_fused", 2, 4, 4, 32, contiguous(130), contiguous(130), false, true),
           "amx"),
        on(problem("T45_gqa8_hd32", 1, 8, 1, 32, contiguous(45), contiguous(45), true, false),
           "avx512"),
        on(problem("T33_hd16_rope", 2, 2, 2, 16, contiguous(33), contiguous(33), true, false),
           "portable"),
        with_dropout(on(problem("T77_gqa2_hd64_rope_fused", 2, 4, 2, 64, contiguous(77),
                                contiguous(77), true, true),
                        "amx"),
                     0.2f)),
    [](const ::testing::TestParamInfo<FlashProblem>& info) { return info.param.name; });

}  // namespace
}  // namespace mt::test
