// The bf16 SwiGLU kernels must store to_bf16 of the fp32 kernels' values for every input,
// special ones included: a negative NaN (stored as the canonical 0x7FC0) and denormal
// results (kept, not flushed), in a row's first 256 values, its second 256 or its tail, on
// one and two threads. LlamaKernelsBf16.SwigluOutputsAreTheRoundedFp32Outputs plants none;
// this is what a faster rounding (the conversion instruction, which flushes denormals and
// keeps a NaN's sign) must still pass. It fails when the rounding drops the NaN select.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernel_harness.h"
#include "kernels/swiglu.h"

namespace mt::test {
namespace {

std::vector<bf16> rounded(const Buf& v) {
  std::vector<bf16> r(v.size());
  to_bf16(r.data(), v.data(), v.size());
  return r;
}

// Row r's unit `at` gets a negative NaN gate (NaN outputs and gradients), the unit beside it
// a tiny gate and up (silu(gate) * up denormal), the next a denormal up (dgate, dout * up
// times a factor below 1.1, denormal).
void plant_specials(Buf& gu, int F, int r, int at) {
  const size_t row = size_t(r) * 2 * F;
  uint32_t negative_nan = 0xFFC00001u;
  std::memcpy(&gu[row + at], &negative_nan, sizeof(float));
  const int next = at + 1 < F ? at + 1 : at - 1;
  gu[row + next] = 1e-20f;      // silu ~ gate / 2 = 5e-21
  gu[row + F + next] = 1e-18f;  // out ~ 5e-39: denormal
  const int far = at + 2 < F ? at + 2 : at - 2;
  gu[row + F + far] = 1e-39f;
}

bool has_denormal_and_nan(const Buf& v) {
  bool denormal = false, nan = false;
  for (float x : v) {
    denormal |= std::fpclassify(x) == FP_SUBNORMAL;
    nan |= std::isnan(x);
  }
  return denormal && nan;
}

TEST(Bf16SwigluRows, ASpecialValueAnywhereKeepsEveryRowsBits) {
  const int N = 6;
  for (int F : {100, 600})  // one chunk with a tail of 4; chunks of 256, 256 and 88
    for (int at : {0, 40, 300, F - 1})
      for (int threads : {1, 2}) {
        if (at >= F) continue;
        Buf gu = random_normal(size_t(N) * 2 * F, 71, 3.0f);
        const Buf dout = random_normal(size_t(N) * F, 72);
        plant_specials(gu, F, 3, at);
        omp_set_num_threads(threads);
        Buf out(size_t(N) * F), dgu(gu.size());
        swiglu_forward(out.data(), gu.data(), N, F);
        swiglu_backward(dgu.data(), gu.data(), dout.data(), N, F, /*accumulate=*/false);
        std::vector<bf16> out16(out.size(), bf16(0x1234)), dgu16(dgu.size(), bf16(0x1234));
        swiglu_forward_bf16(out16.data(), gu.data(), N, F);
        swiglu_backward_bf16(dgu16.data(), gu.data(), dout.data(), N, F);
        ASSERT_TRUE(has_denormal_and_nan(out)) << "the planted forward values";
        ASSERT_TRUE(has_denormal_and_nan(dgu)) << "the planted backward values";
        const std::string where = "F " + std::to_string(F) + ", special at " + std::to_string(at) +
                                  ", threads " + std::to_string(threads);
        EXPECT_EQ(out16, rounded(out)) << "swiglu_forward_bf16, " << where;
        EXPECT_EQ(dgu16, rounded(dgu)) << "swiglu_backward_bf16, " << where;
      }
  omp_set_num_threads(1);
}

}  // namespace
}  // namespace mt::test
