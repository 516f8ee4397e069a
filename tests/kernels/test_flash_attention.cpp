// Flash attention (kernels/flash_attention.h) through the kernel harness (fast vs the naive
// double twin, += semantics, finite differences) over shapes at the edges and positions of one
// worker, zigzag ring steps, fully masked and fully visible key blocks; then the properties
// context parallelism and the Llama block rely on: merges over key blocks equal one call, a
// zigzag ring equals one worker (forward and backward), GQA equals MHA on repeated K/V, fused
// RoPE equals rope_forward then the kernel, agreement with the GPT block's attention, the same
// bits at 1 and 2 threads, and scratch that grows as O(T).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_test_setup.h"
#include "kernels/kernel_harness.h"
#include "kernels/reference/flash_attention_ref.h"
#include "kernels/rope.h"

namespace mt::test {
namespace {

KernelCase flash_case(const FlashProblem& p, bool finite_differences = true) {
  auto s = std::make_shared<FlashSetup>(p);
  KernelCase kc;
  kc.name = p.name + (p.precision == FlashPrecision::bf16 ? "_bf16" : "");
  kc.inputs = s->inputs(41);
  // lse as two outputs the harness can compare: its finite values (0 for -inf) and which rows
  // saw a key (a normalised error over -inf entries would be NaN, i.e. no check at all).
  kc.output_sizes = {s->out_size(), s->lse_size(), s->lse_size()};
  kc.forward = [s](Impl impl, const Bufs& in, Bufs& out) {
    run_forward(impl, *s, in, out[0], out[1]);
    for (size_t i = 0; i < out[1].size(); i++) {
      out[2][i] = out[1][i] == -INFINITY ? 0.0f : 1.0f;
      if (out[2][i] == 0.0f) out[1][i] = 0.0f;
    }
  };
  std::vector<int> wrt = p.fused ? std::vector<int>{0} : std::vector<int>{0, 1};
  kc.backwards.push_back(
      {"backward", wrt, true,
       [s](Impl impl, const Bufs& in, const Bufs& out, const Buf& dout, Bufs& din) {
         Buf lse = out[1];
         for (size_t i = 0; i < lse.size(); i++)
           if (out[2][i] == 0.0f) lse[i] = -INFINITY;
         run_backward(impl, *s, in, out[0], lse, dout, din);
       }});
  kc.finite_differences = finite_differences && p.precision == FlashPrecision::fp32;
  if (p.precision == FlashPrecision::bf16) {
    // A smoke bound only (every shape and mask on the bf16 path); the propagated elementwise
    // bound against fp32 is test_flash_attention_bf16.cpp's.
    kc.fwd_tol = 0.02;
    kc.bwd_tol = 0.02;
  }
  return kc;
}

std::vector<FlashProblem> problems() {
  std::vector<FlashProblem> ps = {
      problem("T1_gqa2_hd16", 2, 2, 1, 16, {0}, {0}, true, true),
      problem("T37_gqa2_hd64", 2, 4, 2, 64, contiguous(37), contiguous(37), true, true),
      problem("T70_mqa8_hd32", 1, 8, 1, 32, contiguous(70), contiguous(70), false, true),
      problem("T100_mha_hd128", 1, 2, 2, 128, contiguous(100), contiguous(100), true, true),
      problem("T45_hd24", 2, 4, 2, 24, contiguous(45), contiguous(45), true, true),
      problem("T5_hd6", 1, 3, 1, 6, contiguous(5), contiguous(5), true, false),
      problem("T33_gqa8_hd16", 1, 16, 2, 16, contiguous(33), contiguous(33), false, true),
      problem("cp2_step_rank0_keys1", 2, 4, 2, 32, zigzag(24, 2, 0), zigzag(24, 2, 1), true, false),
      problem("cp4_step_rank1_keys2", 1, 2, 1, 64, zigzag(64, 4, 1), zigzag(64, 4, 2), true, false),
      problem("cp2_rank0_own_chunks", 1, 2, 1, 16, zigzag(256, 2, 0), zigzag(256, 2, 0), true,
              true),
      problem("fully_masked", 1, 2, 1, 32, contiguous(10), contiguous(40, 50), true, false),
      problem("fully_visible", 2, 2, 1, 64, contiguous(40, 100), contiguous(64), true, false),
      problem("shuffled_positions", 1, 2, 2, 32, shuffled(40, 17), shuffled(40, 17), true, true),
  };
  FlashProblem portable =
      problem("portable_hd64", 1, 4, 1, 64, contiguous(50), contiguous(50), true, true);
  portable.portable = true;
  ps.push_back(portable);
  return ps;
}

std::vector<KernelCase> make_cases() {
  std::vector<KernelCase> cases;
  for (const FlashProblem& p : problems()) {
    cases.push_back(flash_case(p, p.qpos.size() <= 100));
    FlashProblem b = p;
    b.precision = FlashPrecision::bf16;
    cases.push_back(flash_case(b));
  }
  return cases;
}

const std::vector<KernelCase>& all_cases() {
  static const std::vector<KernelCase> cases = make_cases();
  return cases;
}

class FlashAttentionOp : public ::testing::TestWithParam<size_t> {};

TEST_P(FlashAttentionOp, MatchesReferenceAndFiniteDifferences) {
  const KernelCase& kc = all_cases()[GetParam()];
  SCOPED_TRACE(kc.name);
  check_kernel_case(kc);
}

INSTANTIATE_TEST_SUITE_P(All, FlashAttentionOp, ::testing::Range<size_t>(0, all_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return all_cases()[info.param].name;
                         });

// ---- properties -----------------------------------------------------------------------------

// Rows `rows` (positions into the sequence) of each sequence of a (B * T, ld) buffer.
Buf gather_rows(const Buf& x, size_t ld, int B, int T, const std::vector<int>& rows) {
  Buf y;
  for (int b = 0; b < B; b++)
    for (int t : rows)
      y.insert(y.end(), x.begin() + (size_t(b) * T + t) * ld,
               x.begin() + (size_t(b) * T + t + 1) * ld);
  return y;
}

// The inverse: y's rows added into x's rows `rows`.
void scatter_add_rows(Buf& x, const Buf& y, size_t ld, int B, int T, const std::vector<int>& rows) {
  const int n = int(rows.size());
  for (int b = 0; b < B; b++)
    for (int t = 0; t < n; t++)
      for (size_t c = 0; c < ld; c++)
        x[(size_t(b) * T + rows[t]) * ld + c] += y[(size_t(b) * n + t) * ld + c];
}

// lse (B, H, T) restricted to the rows `rows` of each (b, h).
Buf gather_lse(const Buf& lse, int B, int H, int T, const std::vector<int>& rows) {
  return gather_rows(lse, 1, B * H, T, rows);
}

// Ring steps: rank `r`'s queries against the key blocks `sources` (each a FlashSetup over the
// same queries), forward merged in that order, then every step's backward from the final out
// and lse. Returns the merged forward and, per step, the gradients of (q rows, that block).
struct Ring {
  Result merged;
  std::vector<Bufs> grads;
};

Ring run_ring(const std::vector<FlashSetup>& steps, const std::vector<Bufs>& inputs,
              const Buf& dout) {
  Ring ring{{Buf(steps[0].out_size(), 0.0f), Buf(steps[0].lse_size(), 0.0f)}, {}};
  for (size_t s = 0; s < steps.size(); s++)
    run_forward(Impl::fast, steps[s], inputs[s], ring.merged.out, ring.merged.lse, s > 0);
  for (size_t s = 0; s < steps.size(); s++)
    ring.grads.push_back(backward_fast(steps[s], inputs[s], ring.merged, dout));
  return ring;
}

TEST(FlashAttention, MergingKeyBlocksEqualsOneCall) {
  const FlashProblem p =
      problem("merge", 2, 4, 2, 64, contiguous(100), contiguous(100), true, false);
  const FlashSetup one(p);
  const Bufs in = one.inputs(7);
  const Result whole = forward_fast(one, in);
  const Buf dout = random_normal(one.out_size(), 8);
  const Bufs g_whole = backward_fast(one, in, whole, dout);
  // Key blocks [begin, end) in the order merged: two, three, three out of order.
  const std::vector<std::vector<std::pair<int, int>>> splits = {
      {{0, 40}, {40, 100}}, {{0, 30}, {30, 64}, {64, 100}}, {{64, 100}, {0, 30}, {30, 64}}};
  for (const auto& split : splits) {
    std::vector<FlashSetup> steps;
    std::vector<Bufs> inputs;
    std::vector<std::vector<int>> blocks;
    for (const auto& [begin, end] : split) {
      FlashProblem sp = p;
      sp.kpos = contiguous(end - begin, begin);
      blocks.push_back(sp.kpos);
      steps.emplace_back(sp);
      inputs.push_back({in[0], gather_rows(in[1], one.ldkv(), p.B, 100, sp.kpos)});
    }
    SCOPED_TRACE(::testing::Message() << steps.size() << " blocks, first at " << split[0].first);
    const Ring ring = run_ring(steps, inputs, dout);
    EXPECT_LE(normalised_error(ring.merged.out, whole.out), 2e-6);
    EXPECT_LE(normalised_error(ring.merged.lse, whole.lse), 2e-6);
    Buf dq(in[0].size(), 0.0f), dkv(in[1].size(), 0.0f);
    for (size_t s = 0; s < steps.size(); s++) {
      for (size_t i = 0; i < dq.size(); i++) dq[i] += ring.grads[s][0][i];
      scatter_add_rows(dkv, ring.grads[s][1], one.ldkv(), p.B, 100, blocks[s]);
    }
    EXPECT_LE(normalised_error(dq, g_whole[0]), 1e-5);
    EXPECT_LE(normalised_error(dkv, g_whole[1]), 1e-5);
  }
}

// Context parallelism at the kernel level: every zigzag rank's queries against every rank's
// K/V block in ring order equal one worker, forward and backward (a ring that reused the
// first block's K/V in backward would give the wrong dk, dv here).
TEST(FlashAttention, ZigzagRingEqualsOneWorker) {
  for (int cp : {2, 4}) {
    const int T = 96;
    const FlashProblem p = problem("ring", 2, 4, 1, 32, contiguous(T), contiguous(T), true, false);
    const FlashSetup one(p);
    const Bufs in = one.inputs(9);
    const Result whole = forward_fast(one, in);
    const Buf dout = random_normal(one.out_size(), 10);
    const Bufs g_whole = backward_fast(one, in, whole, dout);
    Buf dq(in[0].size(), 0.0f), dkv(in[1].size(), 0.0f);
    for (int r = 0; r < cp; r++) {
      SCOPED_TRACE(::testing::Message() << "cp " << cp << " rank " << r);
      const std::vector<int> mine = zigzag(T, cp, r);
      std::vector<FlashSetup> steps;
      std::vector<Bufs> inputs;
      std::vector<std::vector<int>> blocks;
      for (int s = 0; s < cp; s++) {
        FlashProblem sp = p;
        sp.qpos = mine;
        sp.kpos = zigzag(T, cp, (r - s + cp) % cp);
        blocks.push_back(sp.kpos);
        steps.emplace_back(sp);
        inputs.push_back({gather_rows(in[0], one.ldq(), p.B, T, mine),
                          gather_rows(in[1], one.ldkv(), p.B, T, sp.kpos)});
      }
      const Ring ring = run_ring(steps, inputs, gather_rows(dout, one.ldo(), p.B, T, mine));
      EXPECT_LE(normalised_error(ring.merged.out, gather_rows(whole.out, one.ldo(), p.B, T, mine)),
                2e-6);
      EXPECT_LE(normalised_error(ring.merged.lse, gather_lse(whole.lse, p.B, p.H, T, mine)), 2e-6);
      for (int s = 0; s < cp; s++) {
        scatter_add_rows(dq, ring.grads[s][0], one.ldq(), p.B, T, mine);
        scatter_add_rows(dkv, ring.grads[s][1], one.ldkv(), p.B, T, blocks[s]);
      }
    }
    EXPECT_LE(normalised_error(dq, g_whole[0]), 1e-5) << "cp " << cp;
    EXPECT_LE(normalised_error(dkv, g_whole[1]), 1e-5) << "cp " << cp;
  }
}

// A ring step whose keys are all in the queries' future: lse -inf and out 0, which a merge
// ignores bit for bit, and no gradient.
TEST(FlashAttention, RowsWithoutVisibleKeysMergeAsNothing) {
  const FlashProblem p =
      problem("masked", 2, 2, 1, 32, contiguous(10), contiguous(40, 50), true, false);
  const FlashSetup s(p);
  const Bufs in = s.inputs(19);
  const FlashAttention a = s.args(in);
  Buf scratch(flash_attention_forward_scratch_floats(a));
  Buf out(s.out_size(), std::numeric_limits<float>::quiet_NaN()), lse(s.lse_size(), 0.0f);
  flash_attention_forward(out.data(), s.ldo(), lse.data(), a, false, scratch);
  for (float x : lse) EXPECT_EQ(x, -INFINITY);
  for (size_t r = 0; r < out.size() / s.ldo(); r++)
    for (int c = 0; c < p.H * p.hd; c++) ASSERT_EQ(out[r * s.ldo() + c], 0.0f);
  const Buf held = random_normal(out.size(), 20), held_lse = random_normal(lse.size(), 21);
  Buf merged = held, merged_lse = held_lse;
  flash_attention_forward(merged.data(), s.ldo(), merged_lse.data(), a, true, scratch);
  EXPECT_EQ(merged, held);
  EXPECT_EQ(merged_lse, held_lse);
  const Bufs g = backward_fast(s, in, {held, held_lse}, random_normal(out.size(), 22));
  for (const Buf& d : g)
    for (float x : d) ASSERT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace mt::test
