// Flash attention equal to what it must equal: GQA to MHA on explicitly repeated K/V, fused
// RoPE to rope_forward followed by the kernel, one worker without RoPE and GQA to the GPT
// block's attention core; the same bits at 1 and 2 threads on every path; scratch linear in T.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_tiles.h"
#include "kernels/flash_test_setup.h"
#include "kernels/kernel_harness.h"
#include "kernels/rope.h"

namespace mt::test {
namespace {

// The kernel never repeats K/V per query head; the reference of this test does, by hand.
TEST(FlashAttention, GqaEqualsMhaOnRepeatedKv) {
  for (FlashPrecision precision : {FlashPrecision::fp32, FlashPrecision::bf16}) {
    FlashProblem g = problem("gqa", 2, 8, 2, 64, contiguous(70), contiguous(70), true, false);
    g.precision = precision;
    FlashProblem m = g;
    m.Hkv = 8;
    const FlashSetup sg(g), sm(m);
    const Bufs in = sg.inputs(11);
    Bufs in_m = {in[0], Buf(size_t(2) * 70 * sm.ldkv(), 0.0f)};
    const int hd = 64, G = 4;
    for (size_t row = 0; row < size_t(2) * 70; row++)
      for (int h = 0; h < 8; h++)
        for (int part = 0; part < 2; part++)  // k, then v
          for (int d = 0; d < hd; d++)
            in_m[1][row * sm.ldkv() + (part * 8 + h) * hd + d] =
                in[1][row * sg.ldkv() + (part * 2 + h / G) * hd + d];
    const Result rg = forward_fast(sg, in), rm = forward_fast(sm, in_m);
    EXPECT_EQ(rg.out, rm.out) << "the same arithmetic per query head";
    EXPECT_EQ(rg.lse, rm.lse);
    const Buf dout = random_normal(sg.out_size(), 12);
    const Bufs dg = backward_fast(sg, in, rg, dout), dm = backward_fast(sm, in_m, rm, dout);
    Buf summed(dg[1].size(), 0.0f);
    for (size_t row = 0; row < size_t(2) * 70; row++)
      for (int h = 0; h < 8; h++)
        for (int part = 0; part < 2; part++)
          for (int d = 0; d < hd; d++)
            summed[row * sg.ldkv() + (part * 2 + h / G) * hd + d] +=
                dm[1][row * sm.ldkv() + (part * 8 + h) * hd + d];
    EXPECT_LE(normalised_error(dg[0], dm[0]), 1e-6);
    EXPECT_LE(normalised_error(dg[1], summed), 1e-6);
  }
}

TEST(FlashAttention, FusedRopeEqualsRopeForwardThenTheKernel) {
  const FlashProblem r =
      problem("rope", 2, 4, 2, 64, zigzag(128, 2, 1), zigzag(128, 2, 1), true, false);
  FlashProblem n = r;
  n.rope = false;
  const FlashSetup sr(r), sn(n);
  const Bufs in = sr.inputs(13);
  const int B = 2, T = 64;
  Bufs rotated = in;  // q and k rotated in memory (v, the second half of the kv rows, kept)
  rope_forward(rotated[0].data(), B * T, sr.ldq(), 4, T, r.qpos.data(), sr.table);
  rope_forward(rotated[1].data(), B * T, sr.ldkv(), 2, T, r.kpos.data(), sr.table);
  const Result fused = forward_fast(sr, in), plain = forward_fast(sn, rotated);
  EXPECT_EQ(fused.out, plain.out);
  EXPECT_EQ(fused.lse, plain.lse);
  const Buf dout = random_normal(sr.out_size(), 14);
  const Bufs gf = backward_fast(sr, in, fused, dout);
  Bufs gp = backward_fast(sn, rotated, plain, dout);
  rope_backward(gp[0].data(), B * T, sr.ldq(), 4, T, r.qpos.data(), sr.table);
  rope_backward(gp[1].data(), B * T, sr.ldkv(), 2, T, r.kpos.data(), sr.table);
  EXPECT_LE(normalised_error(gf[0], gp[0]), 1e-6);
  EXPECT_LE(normalised_error(gf[1], gp[1]), 1e-6);
}

// Without RoPE and GQA, one worker's flash attention is the GPT block's attention core.
TEST(FlashAttention, AgreesWithTheGptBlocksAttention) {
  struct Shape {
    int B, T, C, NH;
  };
  for (const Shape& sh : {Shape{2, 100, 256, 4}, Shape{1, 130, 128, 4}, Shape{2, 40, 96, 2}}) {
    const auto [B, T, C, NH] = sh;
    SCOPED_TRACE(::testing::Message() << "T " << T << " hd " << C / NH);
    const Buf qkv = random_normal(size_t(B) * T * 3 * C, 15),
              dout = random_normal(size_t(B) * T * C, 16);
    Buf out(size_t(B) * T * C), att(size_t(B) * NH * T * T), dqkv(qkv.size(), 0.0f);
    Buf scratch(attention_backward_scratch_floats(B, T, C, NH));
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C,
                       NH);
    const std::vector<int> pos = contiguous(T);
    FlashAttention a;
    a.B = B, a.Tq = a.Tk = T, a.H = a.Hkv = NH, a.hd = C / NH;
    a.q = qkv.data(), a.k = a.q + C, a.v = a.q + 2 * C, a.ldq = a.ldk = a.ldv = 3 * C;
    a.qpos = a.kpos = pos.data();
    Buf fout(out.size()), lse(size_t(B) * NH * T), D(lse.size()), fd(qkv.size(), 0.0f);
    Buf fs(std::max(flash_attention_forward_scratch_floats(a),
                    flash_attention_backward_scratch_floats(a)));
    flash_attention_forward(fout.data(), C, lse.data(), a, false, fs);
    flash_attention_backward_prep(D.data(), fout.data(), C, dout.data(), C, B, T, NH, C / NH);
    flash_attention_backward(
        {fd.data(), fd.data() + C, fd.data() + 2 * C, size_t(3 * C), size_t(3 * C), size_t(3 * C)},
        dout.data(), C, lse.data(), D.data(), a, fs);
    EXPECT_LE(normalised_error(fout, out), 1e-5);
    EXPECT_LE(normalised_error(fd, dqkv), 1e-5);
  }
}

// Tasks are fixed by the shape; B * Hkv = 1 also splits the backward's keys into chunks.
TEST(FlashAttention, SameBitsAtOneAndTwoThreads) {
  const int saved = omp_get_max_threads();
  for (FlashPrecision precision : {FlashPrecision::fp32, FlashPrecision::bf16})
    for (bool portable : {false, true}) {
      FlashProblem p =
          problem("threads", 1, 4, 1, 64, contiguous(200), contiguous(200), true, true);
      p.precision = precision, p.portable = portable;
      const FlashSetup s(p);
      const Bufs in = s.inputs(17);
      const Buf dout = random_normal(s.out_size(), 18);
      omp_set_num_threads(1);
      const Result r1 = forward_fast(s, in);
      const Bufs g1 = backward_fast(s, in, r1, dout);
      omp_set_num_threads(2);
      const Result r2 = forward_fast(s, in);
      const Bufs g2 = backward_fast(s, in, r2, dout);
      EXPECT_EQ(r1.out, r2.out) << flash_attention_path(s.args(in));
      EXPECT_EQ(r1.lse, r2.lse);
      EXPECT_EQ(g1[0], g2[0]) << flash_attention_path(s.args(in));
    }
  omp_set_num_threads(saved);
}

TEST(FlashAttention, ScratchIsLinearInTAndATooSmallOneIsRefused) {
  auto sizes = [](int T) {
    const std::vector<int> pos = contiguous(T);
    FlashAttention a;
    a.Tq = a.Tk = T, a.H = 8, a.Hkv = 2, a.hd = 64, a.ldq = 512, a.ldk = a.ldv = 128;
    a.qpos = a.kpos = pos.data();
    return std::pair(flash_attention_forward_scratch_floats(a),
                     flash_attention_backward_scratch_floats(a));
  };
  const auto [f1, b1] = sizes(1024);
  const auto [f2, b2] = sizes(2048);
  EXPECT_LT(f2, 2.05 * f1);
  EXPECT_LT(b2, 2.05 * b1);
  // A fraction of the (B, H, T, T) probabilities the GPT block's kernel keeps.
  EXPECT_LT(b1, size_t(8) * 1024 * 1024 / 2);
  const FlashSetup s(problem("small", 1, 2, 1, 16, contiguous(40), contiguous(40), false, true));
  const Bufs in = s.inputs(23);
  Buf out(s.out_size()), lse(s.lse_size());
  Buf scratch(flash_attention_forward_scratch_floats(s.args(in)) - 1);
  EXPECT_THROW(flash_attention_forward(out.data(), s.ldo(), lse.data(), s.args(in), false, scratch),
               RuntimeError);
}

TEST(FlashAttention, ReportsWhichKernelsRun) {
  FlashAttention a;
  a.hd = 64;
  const std::string fp32 = flash_attention_path(a);
  a.precision = FlashPrecision::bf16;
  const std::string bf16 = flash_attention_path(a);
#if defined(__AVX512F__)
  EXPECT_EQ(fp32, "avx512-fp32");
  EXPECT_EQ(bf16, flash::tiles_amx_bf16(64)              ? "amx-bf16"
                  : __builtin_cpu_supports("avx512bf16") ? "avx512-bf16"
                                                         : "avx512-fp32");
  a.amx = false;  // the fallback where AMX runs
  EXPECT_EQ(std::string(flash_attention_path(a)),
            __builtin_cpu_supports("avx512bf16") ? "avx512-bf16" : "avx512-fp32");
  a.amx = true;
#else
  EXPECT_EQ(fp32, "portable");
  EXPECT_EQ(bf16, "portable");
#endif
  RecordProperty("path_fp32_hd64", fp32);
  RecordProperty("path_bf16_hd64", bf16);
  a.hd = 24;
  EXPECT_STREQ(flash_attention_path(a), "portable");
  a.hd = 64, a.portable = true;
  EXPECT_STREQ(flash_attention_path(a), "portable");
}

}  // namespace
}  // namespace mt::test
