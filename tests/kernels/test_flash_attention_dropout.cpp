// Dropout on flash attention's probabilities (kernels/flash_attention.h "dropout"): the fast
// kernels against the naive twin (which draws every element from dropout_keeps) and finite
// differences, on every tile path (AVX-512 fp32, AVX-512-BF16, portable) and at ring steps;
// the mask each path applies is exactly the formula's for (query token, head, key position);
// a tensor-parallel split of the heads and a zigzag ring draw one worker's mask; and the
// gpt2 block's former (T, T) dropout kernel draws the same mask (the masks did not change).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "kernels/flash_attention.h"
#include "kernels/flash_test_setup.h"
#include "kernels/kernel_harness.h"
#include "kernels/reference/attention_dropout.h"
#include "kernels/reference/flash_attention_ref.h"

namespace mt::test {
namespace {

KernelCase dropout_case(const FlashProblem& p) {
  auto s = std::make_shared<FlashSetup>(p);
  KernelCase kc;
  kc.name = p.name + (p.precision == FlashPrecision::bf16 ? "_bf16" : "") +
            (p.portable ? "_portable" : "");
  kc.inputs = s->inputs(43);
  kc.output_sizes = {s->out_size(), s->lse_size()};
  kc.forward = [s](Impl impl, const Bufs& in, Bufs& out) {
    run_forward(impl, *s, in, out[0], out[1]);
  };
  std::vector<int> wrt = p.fused ? std::vector<int>{0} : std::vector<int>{0, 1};
  kc.backwards.push_back(
      {"backward", wrt, true,
       [s](Impl impl, const Bufs& in, const Bufs& out, const Buf& dout, Bufs& din) {
         run_backward(impl, *s, in, out[0], out[1], dout, din);
       }});
  // The mask is fixed by the counters, so the dropped function is smooth in q, k, v.
  kc.finite_differences = p.precision == FlashPrecision::fp32;
  if (p.precision == FlashPrecision::bf16) kc.fwd_tol = kc.bwd_tol = 0.02;
  return kc;
}

FlashProblem dropped(FlashProblem p, float rate, int head_offset = 0, int seq_len = 0) {
  p.dropout = rate, p.head_offset = head_offset, p.seq_len = seq_len;
  return p;
}

std::vector<KernelCase> make_cases() {
  std::vector<FlashProblem> ps = {
      dropped(problem("T37_gqa2_hd64", 2, 4, 2, 64, contiguous(37), contiguous(37), true, true),
              0.3f, 2),
      dropped(problem("T70_mqa4_hd32", 1, 4, 1, 32, contiguous(70), contiguous(70), false, true),
              0.5f),
      dropped(problem("cp2_step_rank0_keys1", 2, 2, 1, 32, zigzag(48, 2, 0), zigzag(48, 2, 1), true,
                      false),
              0.2f, 0, 48),
      dropped(
          problem("cp2_own_chunks", 1, 2, 2, 16, zigzag(96, 2, 1), zigzag(96, 2, 1), true, true),
          0.4f, 1, 96),
  };
  std::vector<KernelCase> cases;
  for (const FlashProblem& p : ps) {
    cases.push_back(dropout_case(p));
    FlashProblem b = p, q = p;
    b.precision = FlashPrecision::bf16;
    cases.push_back(dropout_case(b));
    q.portable = true;
    cases.push_back(dropout_case(q));
  }
  return cases;
}

const std::vector<KernelCase>& all_cases() {
  static const std::vector<KernelCase> cases = make_cases();
  return cases;
}

class FlashAttentionDropout : public ::testing::TestWithParam<size_t> {};

TEST_P(FlashAttentionDropout, MatchesReferenceAndFiniteDifferences) {
  const KernelCase& kc = all_cases()[GetParam()];
  SCOPED_TRACE(kc.name);
  check_kernel_case(kc);
}

INSTANTIATE_TEST_SUITE_P(All, FlashAttentionDropout,
                         ::testing::Range<size_t>(0, all_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return all_cases()[info.param].name;
                         });

// q = k = 0 makes P uniform over the visible keys, and v_j = e_j puts key j's dropped
// probability in output column j: out(i, h, j) != 0 exactly where the formula keeps (token of
// row i, head, position of key j). Checked on each tile path with zigzag (cp) positions.
TEST(FlashAttentionDropout, EveryPathAppliesTheFormulasMask) {
  const std::vector<int> pos = zigzag(96, 2, 1);  // 48 rows, hd 64 >= Tk
  for (auto [precision, portable] :
       {std::pair{FlashPrecision::fp32, false}, std::pair{FlashPrecision::bf16, false},
        std::pair{FlashPrecision::fp32, true}}) {
    FlashProblem p = dropped(problem("mask", 2, 2, 1, 64, pos, pos, false, false), 0.4f, 3, 96);
    p.precision = precision, p.portable = portable;
    const FlashSetup s(p);
    Bufs in = {Buf(size_t(p.B) * s.Tq() * s.ldq(), 0.0f), Buf(size_t(p.B) * s.Tk() * s.ldkv(), 0)};
    for (int b = 0; b < p.B; b++)
      for (int j = 0; j < s.Tk(); j++) in[1][(size_t(b) * s.Tk() + j) * s.ldkv() + p.hd + j] = 1;
    const Result r = forward_fast(s, in);
    const FlashAttention a = s.args(in);
    SCOPED_TRACE(flash_attention_path(a));
    int kept = 0, dropped_count = 0;
    for (int b = 0; b < p.B; b++)
      for (int h = 0; h < p.H; h++)
        for (int i = 0; i < s.Tq(); i++)
          for (int j = 0; j < s.Tk(); j++) {
            const float o = r.out[(size_t(b) * s.Tq() + i) * s.ldo() + size_t(h) * p.hd + j];
            const bool visible = pos[j] <= pos[i];
            const bool keep =
                dropout_keeps(a.dropout.key, p.dropout, s.tokens[size_t(b) * s.Tq() + i],
                              (p.head_offset + h) * s.seq_len() + pos[j]);
            ASSERT_EQ(o != 0.0f, visible && keep)
                << "b " << b << " h " << h << " i " << i << " j " << j;
            if (visible) (keep ? kept : dropped_count)++;
          }
    // About p of the visible probabilities dropped (a mask, not all or nothing).
    EXPECT_NEAR(double(dropped_count) / (kept + dropped_count), p.dropout, 0.05);
  }
}

// Rows of each sequence of a (B * T, ld) buffer, and the inverse (added).
Buf gather_rows(const Buf& x, size_t ld, int B, int T, const std::vector<int>& rows) {
  Buf y;
  for (int b = 0; b < B; b++)
    for (int t : rows)
      y.insert(y.end(), x.begin() + (size_t(b) * T + t) * ld,
               x.begin() + (size_t(b) * T + t + 1) * ld);
  return y;
}

void scatter_add_rows(Buf& x, const Buf& y, size_t ld, int B, int T, const std::vector<int>& rows) {
  for (int b = 0; b < B; b++)
    for (size_t t = 0; t < rows.size(); t++)
      for (size_t c = 0; c < ld; c++)
        x[(size_t(b) * T + rows[t]) * ld + c] += y[(size_t(b) * rows.size() + t) * ld + c];
}

// Context parallelism: each zigzag rank's queries against every rank's keys in ring order
// (merged forward, per-step backward from the final lse) equal one worker with dropout on.
TEST(FlashAttentionDropout, ZigzagRingDrawsOneWorkersMask) {
  const int T = 64, cp = 2;
  const FlashProblem p =
      dropped(problem("ring", 2, 2, 1, 32, contiguous(T), contiguous(T), true, false), 0.3f, 0, T);
  const FlashSetup one(p);
  const Bufs in = one.inputs(9);
  const Result whole = forward_fast(one, in);
  const Buf dout = random_normal(one.out_size(), 10);
  const Bufs g_whole = backward_fast(one, in, whole, dout);
  Buf dq(in[0].size(), 0.0f), dkv(in[1].size(), 0.0f);
  for (int r = 0; r < cp; r++) {
    const std::vector<int> mine = zigzag(T, cp, r);
    std::vector<std::unique_ptr<FlashSetup>> steps;
    std::vector<Bufs> inputs;
    Result merged{Buf(one.ldo() * p.B * mine.size(), 0.0f), Buf(size_t(p.B) * p.H * mine.size())};
    for (int s = 0; s < cp; s++) {
      FlashProblem sp = p;
      sp.qpos = mine;
      sp.kpos = zigzag(T, cp, (r - s + cp) % cp);
      steps.push_back(std::make_unique<FlashSetup>(sp));
      inputs.push_back({gather_rows(in[0], one.ldq(), p.B, T, mine),
                        gather_rows(in[1], one.ldkv(), p.B, T, sp.kpos)});
      run_forward(Impl::fast, *steps.back(), inputs.back(), merged.out, merged.lse, s > 0);
    }
    EXPECT_LE(normalised_error(merged.out, gather_rows(whole.out, one.ldo(), p.B, T, mine)), 2e-6)
        << "rank " << r;
    const Buf my_dout = gather_rows(dout, one.ldo(), p.B, T, mine);
    for (int s = 0; s < cp; s++) {
      const Bufs g = backward_fast(*steps[size_t(s)], inputs[size_t(s)], merged, my_dout);
      scatter_add_rows(dq, g[0], one.ldq(), p.B, T, mine);
      scatter_add_rows(dkv, g[1], one.ldkv(), p.B, T, steps[size_t(s)]->p.kpos);
    }
  }
  EXPECT_LE(normalised_error(dq, g_whole[0]), 1e-5);
  EXPECT_LE(normalised_error(dkv, g_whole[1]), 1e-5);
}

// Tensor parallelism: two ranks of two heads each (head_offset 0 and 2) draw the columns of
// one worker's four heads.
TEST(FlashAttentionDropout, HeadSplitDrawsOneWorkersMask) {
  const int T = 40, hd = 32;
  const FlashSetup one(
      dropped(problem("tp", 1, 4, 4, hd, contiguous(T), contiguous(T), true, false), 0.5f));
  const Bufs in = one.inputs(11);
  const Result whole = forward_fast(one, in);
  for (int rank = 0; rank < 2; rank++) {
    const FlashSetup half(
        dropped(problem("tp_half", 1, 2, 2, hd, contiguous(T), contiguous(T), true, false), 0.5f,
                2 * rank));
    Bufs part = half.inputs(0);
    for (int t = 0; t < T; t++) {
      for (int c = 0; c < 2 * hd; c++) {
        part[0][size_t(t) * half.ldq() + c] = in[0][size_t(t) * one.ldq() + 2 * rank * hd + c];
        part[1][size_t(t) * half.ldkv() + c] = in[1][size_t(t) * one.ldkv() + 2 * rank * hd + c];
        part[1][size_t(t) * half.ldkv() + 2 * hd + c] =
            in[1][size_t(t) * one.ldkv() + 4 * hd + 2 * rank * hd + c];
      }
    }
    const Result r = forward_fast(half, part);
    for (int t = 0; t < T; t++)
      for (int c = 0; c < 2 * hd; c++)
        ASSERT_EQ(r.out[size_t(t) * half.ldo() + c],
                  whole.out[size_t(t) * one.ldo() + 2 * rank * hd + c])
            << "rank " << rank << " row " << t << " col " << c;
  }
}

// The gpt2 block's (T, T) attention with dropout (attention_dropout.h, the kernel it ran
// before the flash core drew masks) and the flash kernel on the same fused qkv rows: the
// same probabilities are dropped, so the outputs and gradients agree to rounding.
TEST(FlashAttentionDropout, DrawsTheTxTKernelsMask) {
  const int B = 2, T = 48, NH = 2, hd = 16, C = NH * hd;
  const Buf qkv = random_normal(size_t(B) * T * 3 * C, 21);
  std::vector<int> pos = contiguous(T);
  std::vector<int64_t> tokens;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) tokens.push_back(int64_t(b + 5) * T + t);
  const DropoutKey key{9, 4, 1};
  const float rate = 0.3f;
  Buf out_tt(size_t(B) * T * C), att(size_t(B) * NH * T * T);
  attention_dropout_forward(out_tt.data(), att.data(), qkv.data(), B, T, C, NH,
                            {key, rate, tokens.data(), 1});
  FlashAttention a;
  a.B = B, a.Tq = a.Tk = T, a.H = a.Hkv = NH, a.hd = hd;
  a.q = qkv.data(), a.k = qkv.data() + C, a.v = qkv.data() + 2 * C;
  a.ldq = a.ldk = a.ldv = size_t(3 * C);
  a.qpos = a.kpos = pos.data();
  a.dropout = {key, rate, tokens.data(), 1, T};
  Buf out(size_t(B) * T * C), lse(size_t(B) * NH * T);
  Buf scratch(flash_attention_forward_scratch_floats(a));
  flash_attention_forward(out.data(), C, lse.data(), a, false, scratch);
  EXPECT_LE(normalised_error(out, out_tt), 1e-5);

  const Buf dout = random_normal(out.size(), 22);
  Buf dqkv_tt(qkv.size()), dqkv(qkv.size(), 0.0f), D(lse.size());
  attention_dropout_backward(dqkv_tt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH,
                             {key, rate, tokens.data(), 1});
  flash_attention_backward_prep(D.data(), out.data(), C, dout.data(), C, B, T, NH, hd);
  scratch.assign(flash_attention_backward_scratch_floats(a), 0.0f);
  flash_attention_backward({dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, size_t(3 * C),
                            size_t(3 * C), size_t(3 * C)},
                           dout.data(), C, lse.data(), D.data(), a, scratch);
  EXPECT_LE(normalised_error(dqkv, dqkv_tt), 1e-5);
}

}  // namespace
}  // namespace mt::test
