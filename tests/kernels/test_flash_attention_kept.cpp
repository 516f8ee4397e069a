// Flash attention's kept packing (FlashAttention::packed, the Llama block on one worker): the
// forward packs q and K of every sequence there and the backward reads them instead of
// packing again. Pinned: the same bits as packing per call (forward and backward, fp32 and
// bf16 paths, GQA, RoPE, odd T, B > 1, dropout), and that the backward does read the kept
// form (a kept buffer changed after the forward changes the gradients).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "kernels/flash_attention.h"
#include "kernels/flash_test_setup.h"
#include "kernels/kernel_harness.h"

namespace mt::test {
namespace {

struct Pass {
  Result r;
  Bufs din;
};

// Forward then backward with a kept packing of `kept` (resized, so null is never passed), or
// without one (kept null); `touch` edits the kept packing between the two.
template <class Touch>
Pass run_with(const FlashSetup& s, const Bufs& in, const Buf& dout, Buf* kept, Touch touch) {
  FlashAttention a = s.args(in);
  if (kept) {
    kept->assign(flash_attention_packed_floats(a), 0.0f);
    a.packed = kept->data();
  }
  Pass run{{Buf(s.out_size(), 0.0f), Buf(s.lse_size(), 0.0f)}, {}};
  Buf fs(flash_attention_forward_scratch_floats(a));
  flash_attention_forward(run.r.out.data(), s.ldo(), run.r.lse.data(), a, false, fs);
  if (kept) touch(*kept);
  for (const Buf& b : in) run.din.emplace_back(b.size(), 0.0f);
  Buf D(s.lse_size()), bs(flash_attention_backward_scratch_floats(a));
  flash_attention_backward_prep(D.data(), run.r.out.data(), s.ldo(), dout.data(), s.ldo(), s.p.B,
                                s.Tq(), s.p.H, s.p.hd);
  flash_attention_backward(s.grads(run.din), dout.data(), s.ldo(), run.r.lse.data(), D.data(), a,
                           bs);
  return run;
}

class FlashAttentionKept : public ::testing::TestWithParam<FlashProblem> {};

TEST_P(FlashAttentionKept, KeptPackingGivesThePackedPerCallBits) {
  const FlashSetup s(GetParam());
  const Bufs in = s.inputs(71);
  const Buf dout = random_normal(s.out_size(), 72);
  const Pass want = run_with(s, in, dout, nullptr, [](Buf&) {});
  Buf kept;
  const Pass got = run_with(s, in, dout, &kept, [](Buf&) {});
  std::printf("path %s, kept %zu floats\n", flash_attention_path(s.args(in)), kept.size());
  EXPECT_TRUE(std::any_of(kept.begin(), kept.end(), [](float x) { return x != 0.0f; }));
  EXPECT_EQ(got.r.out, want.r.out);
  EXPECT_EQ(got.r.lse, want.r.lse);
  ASSERT_EQ(got.din.size(), want.din.size());
  for (size_t i = 0; i < want.din.size(); i++) EXPECT_EQ(got.din[i], want.din[i]) << "grad " << i;
}

TEST_P(FlashAttentionKept, BackwardReadsTheKeptPacking) {
  const FlashSetup s(GetParam());
  const Bufs in = s.inputs(81);
  const Buf dout = random_normal(s.out_size(), 82);
  Buf kept;
  const Pass as_kept = run_with(s, in, dout, &kept, [](Buf&) {});
  // Halved, the kept q and K are another operand (bf16 pairs stay bf16): if the backward packs
  // q and k again instead, it never sees the change.
  const Pass halved = run_with(s, in, dout, &kept, [](Buf& k) {
    for (float& x : k) x *= 0.5f;
  });
  EXPECT_EQ(halved.r.out, as_kept.r.out);
  EXPECT_NE(halved.din[0], as_kept.din[0]);
}

FlashProblem on(FlashProblem p, const char* path, FlashPrecision precision) {
  p.name += std::string("_") + path;
  p.precision = precision;
  p.portable = std::string(path) == "portable";
  return p;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashAttentionKept,
    ::testing::Values(on(problem("T45_gqa4_hd32_rope_fused", 2, 8, 2, 32, contiguous(45),
                                 contiguous(45), true, true),
                         "bf16", FlashPrecision::bf16),
                      on(problem("T45_gqa4_hd32_rope_fused", 2, 8, 2, 32, contiguous(45),
                                 contiguous(45), true, true),
                         "fp32", FlashPrecision::fp32),
                      on(problem("T100_gqa2_hd64_rope", 1, 4, 2, 64, contiguous(100),
                                 contiguous(100), true, false),
                         "bf16", FlashPrecision::bf16),
                      on(problem("T33_hd16_rope", 2, 2, 2, 16, contiguous(33), contiguous(33), true,
                                 false),
                         "portable", FlashPrecision::fp32),
                      [] {
                        FlashProblem p = on(problem("T77_gqa2_hd32_rope_fused_dropout", 2, 4, 2, 32,
                                                    contiguous(77), contiguous(77), true, true),
                                            "bf16", FlashPrecision::bf16);
                        p.dropout = 0.2f;
                        return p;
                      }()),
    [](const ::testing::TestParamInfo<FlashProblem>& info) { return info.param.name; });

}  // namespace
}  // namespace mt::test
