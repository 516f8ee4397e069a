// The fp32 backward products that overwrite their output instead of being summed onto a
// memset (kernels/matmul.h, kernels/attention.h, kernels/flash_attention.h): the tensor-
// parallel linears' input gradients, the attention core's dqkv and flash attention's on one
// worker. Each must give the bits of the memset followed by the accumulating call, so the fp32
// step stays bit for bit what it was. The overwritten buffer starts as NaN: an element the
// call reads, or leaves unwritten, shows at once. Zero output-gradient rows (and negative
// weights) make all-zero sums, whose sign a store without the 0 + of the memset form could
// turn to -0.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_test_setup.h"
#include "kernels/kernel_harness.h"
#include "kernels/matmul.h"

namespace mt::test {
namespace {

size_t bit_mismatches(const Buf& a, const Buf& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); i++) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

void zero_rows(Buf& x, size_t ld, std::initializer_list<size_t> rows) {
  for (size_t r : rows)
    if ((r + 1) * ld <= x.size()) std::fill(x.begin() + r * ld, x.begin() + (r + 1) * ld, 0.0f);
}

// (N, C, OC) of dinp (N, C) = dout (N, OC) @ w (OC, C): the blocks' shapes at d128 / d256
// (qkv, proj, fc, mlp proj, head), a long reduction (oneDNN blocks K) and odd sizes.
struct GemmShape {
  int N, C, OC;
};
const GemmShape kGemmShapes[] = {{2048, 128, 384}, {2048, 512, 128},  {1024, 256, 768},
                                 {1024, 256, 256}, {1024, 1024, 256}, {1024, 256, 1024},
                                 {256, 256, 8192}, {37, 50, 70},      {3, 300, 5}};

TEST(BackwardOverwrite, MatmulInputEqualsMemsetThenAccumulateBitwise) {
  for (const GemmShape& s : kGemmShapes)
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      Buf dout = random_normal(size_t(s.N) * s.OC, 7), w = random_normal(size_t(s.OC) * s.C, 8);
      zero_rows(dout, s.OC, {0, 2});
      // Column 0 of w all negative: row 0's sum there is over -0 products only.
      for (int o = 0; o < s.OC; o++) w[size_t(o) * s.C] = -std::abs(w[size_t(o) * s.C]) - 0.5f;
      Buf want(size_t(s.N) * s.C, 0.0f), got(want.size(), NAN);
      matmul_backward_input(want.data(), dout.data(), w.data(), s.N, s.C, s.OC);
      matmul_backward_input(got.data(), dout.data(), w.data(), s.N, s.C, s.OC,
                            /*accumulate=*/false);
      EXPECT_EQ(bit_mismatches(got, want), 0u)
          << "N " << s.N << " C " << s.C << " OC " << s.OC << " threads " << threads;
    }
  omp_set_num_threads(1);
}

// The fp32 attention core on every path it has: the register tiles at each compiled head dim
// (both saved forms, lengths past one query block of the dk / dv products and ending inside a
// tile), and the sgemm path (other head dims, past one 128-row block).
TEST(BackwardOverwrite, AttentionEqualsMemsetThenAccumulateBitwise) {
  struct Case {
    int B, T, C, NH;
  };
  const Case cases[] = {{2, 128, 256, 8}, {2, 128, 128, 4}, {1, 200, 128, 2}, {1, 131, 256, 2},
                        {2, 50, 64, 4},   {2, 64, 96, 2},   {1, 160, 96, 4},  {1, 1, 64, 2}};
  for (const Case& c : cases)
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      const size_t rows = size_t(c.B) * c.T;
      const Buf qkv = random_normal(rows * 3 * c.C, 21, 1.5f);
      Buf dout = random_normal(rows * c.C, 22);
      zero_rows(dout, c.C, {0, 3, rows - 1});
      std::vector<AttentionSaved> forms = {AttentionSaved::probabilities};
      if (attention_saved_form(false, c.C, c.NH) == AttentionSaved::row_stats)
        forms.push_back(AttentionSaved::row_stats);
      for (AttentionSaved saved : forms) {
        Buf out(rows * c.C), att(attention_saved_floats(saved, c.B, c.T, c.C, c.NH));
        Buf scratch(attention_backward_scratch_floats(c.B, c.T, c.C, c.NH));
        attention_forward(out.data(), att.data(), qkv.data(), c.B, c.T, c.C, c.NH, saved);
        Buf want(rows * 3 * c.C, 0.0f), got(want.size(), NAN);
        attention_backward(want.data(), scratch.data(), dout.data(), qkv.data(), att.data(), c.B,
                           c.T, c.C, c.NH, saved);
        attention_backward(got.data(), scratch.data(), dout.data(), qkv.data(), att.data(), c.B,
                           c.T, c.C, c.NH, saved, /*accumulate=*/false);
        EXPECT_EQ(bit_mismatches(got, want), 0u)
            << attention_kernel_name(attention_kernel(false, c.C, c.NH)) << " B " << c.B << " T "
            << c.T << " C " << c.C << " NH " << c.NH << " row_stats "
            << (saved == AttentionSaved::row_stats) << " threads " << threads;
      }
    }
  omp_set_num_threads(1);
}

// Flash attention on one worker (the Llama block's core): FlashGrads::overwrite against the sum
// onto zeros, on each fp32 path, with grouped-query heads, RoPE (whose un-rotation of a zero
// row can make -0) and the fused [q | k | v] rows with padded strides, whose padding columns
// the call must leave alone.
TEST(BackwardOverwrite, FlashEqualsMemsetThenAccumulateBitwise) {
  const FlashProblem problems[] = {
      problem("T100_gqa2_hd64_rope_fused", 2, 4, 2, 64, contiguous(100), contiguous(100), true,
              true),
      problem("T130_hd32_fused", 1, 4, 4, 32, contiguous(130), contiguous(130), false, true),
      problem("T45_gqa8_hd32_rope", 1, 8, 1, 32, contiguous(45), contiguous(45), true, false),
      problem("T33_hd16_rope_portable", 2, 2, 2, 16, contiguous(33), contiguous(33), true, false)};
  for (FlashProblem p : problems)
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      p.portable = p.name.find("portable") != std::string::npos;
      const FlashSetup s(p);
      const Bufs in = s.inputs(31);
      Buf dout = random_normal(s.out_size(), 32);
      zero_rows(dout, s.ldo(), {0, size_t(s.Tq()) - 1});
      const Result r = forward_fast(s, in);
      const Bufs want = backward_fast(s, in, r, dout);  // summed onto zeros
      Bufs got;
      for (const Buf& b : in) got.emplace_back(b.size(), NAN);
      // The padding columns stay NaN in both: the reference's zeros there are the memset's.
      Bufs want_padded = want;
      const FlashAttention a = s.args(in);
      FlashGrads g = s.grads(got);
      g.overwrite = true;
      Buf D(s.lse_size()), scratch(flash_attention_backward_scratch_floats(a));
      flash_attention_backward_prep(D.data(), r.out.data(), s.ldo(), dout.data(), s.ldo(), p.B,
                                    s.Tq(), p.H, p.hd);
      flash_attention_backward(g, dout.data(), s.ldo(), r.lse.data(), D.data(), a, scratch);
      const size_t heads[] = {p.fused ? size_t(p.H + 2 * p.Hkv) * p.hd : size_t(p.H) * p.hd,
                              2 * size_t(p.Hkv) * p.hd};
      const size_t lds[] = {s.ldq(), s.ldkv()};
      for (size_t i = 0; i < got.size(); i++)
        for (size_t e = 0; e < got[i].size(); e++)
          if (e % lds[i] >= heads[i]) want_padded[i][e] = NAN;
      for (size_t i = 0; i < got.size(); i++)
        EXPECT_EQ(bit_mismatches(got[i], want_padded[i]), 0u)
            << p.name << " buffer " << i << " path " << flash_attention_path(a) << " threads "
            << threads;
    }
  omp_set_num_threads(1);
}

}  // namespace
}  // namespace mt::test
