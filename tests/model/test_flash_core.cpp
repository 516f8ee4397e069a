// The blocks' flash attention core (model/flash_core.h) under --precision bf16 on one worker:
// the kernel writes the bf16 output and the bf16 [q | k | v] gradients itself, so the fp32
// stage (Bf16Ops::stage) is never written, and the results are bit for bit those of the
// staged path they replace (the fp32 forms into the stage, the gradients summed onto zeros,
// then to_bf16). A Llama-shaped core: fused rows, grouped-query heads, RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/flash_attention.h"
#include "kernels/rope.h"
#include "model/flash_core.h"
#include "model/precision_ops.h"

namespace mt {
namespace {

struct Core {
  int B = 2, T = 70, H = 4, Hkv = 2, hd = 32;
  size_t ld = size_t(H + 2 * Hkv) * hd, cols = size_t(H) * hd, rows = size_t(B) * T;
  RopeTable rope{hd, 128, 10000.0};
  std::vector<int> pos;
  std::vector<float> qkv, dout;

  Core() : pos(T), qkv(rows * ld), dout(rows * cols) {
    for (int t = 0; t < T; t++) pos[t] = t;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    for (float& x : qkv) x = nd(rng);
    for (float& x : dout) x = nd(rng);
  }
  FlashAttention args() const {
    FlashAttention a;
    a.B = B, a.Tq = a.Tk = T, a.H = H, a.Hkv = Hkv, a.hd = hd;
    a.q = qkv.data(), a.k = a.q + cols, a.v = a.k + size_t(Hkv) * hd;
    a.ldq = a.ldk = a.ldv = ld;
    a.qpos = a.kpos = pos.data();
    a.rope = &rope;
    a.precision = FlashPrecision::bf16;
    return a;
  }
};

TEST(FlashCoreBf16, WritesBf16DirectlyAndMatchesTheStagedPath) {
  const Core c;
  const FlashAttention a = c.args();
  // The staged path, as flash_core ran it before: fp32 results, zeroed gradients, to_bf16.
  std::vector<float> fscratch(flash_attention_forward_scratch_floats(a)), out(c.rows * c.cols),
      lse(size_t(c.B) * c.H * c.T), D(lse.size()),
      bscratch(flash_attention_backward_scratch_floats(a)), dqkv(c.rows * c.ld, 0.0f);
  flash_attention_forward(out.data(), c.cols, lse.data(), a, false, fscratch);
  std::vector<bf16> want_out(out.size()), want_dqkv(dqkv.size());
  to_bf16(want_out.data(), out.data(), out.size());
  flash_attention_backward_prep(D.data(), want_out.data(), c.cols, c.dout.data(), c.cols, c.B, c.T,
                                c.H, c.hd);
  const FlashGrads g{dqkv.data(), dqkv.data() + (a.k - a.q), dqkv.data() + (a.v - a.q), c.ld, c.ld,
                     c.ld};
  flash_attention_backward(g, c.dout.data(), c.cols, lse.data(), D.data(), a, bscratch);
  to_bf16(want_dqkv.data(), dqkv.data(), dqkv.size());

  // The core under Bf16Ops, its stage filled with a pattern it must not touch.
  std::vector<float> stage(c.rows * c.ld, -3.5f),
      core_scratch(flash_core_backward_scratch_floats(a));
  const Bf16Ops ops{nullptr, nullptr, stage.data()};
  std::vector<bf16> out16(out.size(), 0x5555), dqkv16(dqkv.size(), 0x5555);
  std::vector<float> lse16(lse.size());
  flash_core_forward(ops, out16.data(), lse16.data(), a, nullptr, fscratch);
  flash_core_backward(ops, dqkv16.data(), c.dout.data(), out16.data(), lse16.data(), a, nullptr,
                      core_scratch.data());
  for (float x : stage) ASSERT_EQ(x, -3.5f) << "the core staged its results in fp32";
  EXPECT_EQ(out16, want_out);
  EXPECT_EQ(lse16, lse);
  EXPECT_EQ(dqkv16, want_dqkv);
}

}  // namespace
}  // namespace mt
