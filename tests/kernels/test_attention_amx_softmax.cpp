// The AMX attention core's fused softmax rows (kernels/attention_amx_softmax.h) against the
// passes they replace, bit for bit: the shared causal rows of attention_avx512_tiles.h
// (softmax_causal_row after the scale, softmax_backward_row) and the bf16 roundings of
// their results, zeros past the row. Row lengths on, off and across the 16-lane vectors,
// up to T 200 and with the block's column count past the row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention_amx.h"
#include "kernels/bf16.h"

#if defined(__AVX512F__)
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their _mm512_undefined_*
// placeholders once the reductions are inlined here (as in attention_amx.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/attention_amx_softmax.h"
#include "kernels/attention_avx512_tiles.h"
#endif

namespace mt {
namespace {

#if defined(__AVX512F__)
using Floats = std::vector<float>;

Floats normal(size_t n, unsigned seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sigma);
  Floats v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// The CPU's bf16 conversion of one value, as the kernel's packers round (nearest even).
bf16 cpu_bf16(float x) {
  alignas(64) float in[16] = {x};
  alignas(64) bf16 out[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                     attention_amx::to_bf16x16(_mm512_load_ps(in)));
  return out[0];
}

// The kernel's row lengths: every causal row of T keys, with the column count of its block.
struct Row {
  int n, T, kcols;
};

std::vector<Row> rows() {
  std::vector<Row> r;
  for (int T : {1, 15, 16, 17, 33, 77, 128, 200})
    for (int i = 0; i < T; i++) r.push_back({i + 1, T, (i / 32 + 1) * 32});
  return r;
}

bool amx_cpu() {
  return attention_amx_supports(32);
}

TEST(AttentionAmxSoftmax, ForwardRowIsTheScaledSoftmaxRowAndItsRounding) {
  if (!amx_cpu()) GTEST_SKIP() << "no AMX tiles on this CPU";
  const float scale = 0.17677669f;  // 1/sqrt(32)
  for (const Row& r : rows()) {
    const Floats s = normal(size_t(r.kcols), unsigned(r.n * 131 + r.T), 4.0f);
    // The passes: scale into the row, softmax in place, round the valid columns.
    Floats want(size_t(r.T), 9.0f);
    for (int j = 0; j < r.n; j++) want[j] = s[j] * scale;
    attention_avx512::softmax_causal_row(want.data(), r.n - 1, r.T);
    std::vector<bf16> want_p(size_t(r.kcols), 0);
    for (int j = 0; j < r.n; j++) want_p[j] = cpu_bf16(want[j]);
    // The fused row, into a row followed by a guard that must stay untouched.
    Floats got(size_t(r.T) + 16, 9.0f);
    std::vector<bf16> got_p(size_t(r.kcols), 0x5555);
    attention_amx::softmax_row_bf16(got.data(), got_p.data(), s.data(), scale, r.n, r.T, r.kcols);
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(float) * r.T))
        << "n " << r.n << " T " << r.T;
    for (int j = r.T; j < r.T + 16; j++) ASSERT_EQ(got[j], 9.0f) << "wrote past the row";
    ASSERT_EQ(got_p, want_p) << "n " << r.n << " T " << r.T;
  }
}

TEST(AttentionAmxSoftmax, BackwardPairIsTheSoftmaxBackwardRowsAndTheirRoundings) {
  if (!amx_cpu()) GTEST_SKIP() << "no AMX tiles on this CPU";
  const float scale = 0.125f;
  for (const Row& r : rows()) {
    // Row 0 sees n keys; row 1 sees n + 1 of them, or is past T (n == T).
    const int n1 = r.n < r.T ? r.n + 1 : 0, kcols = std::max(r.kcols, (n1 + 31) / 32 * 32);
    Floats p0 = normal(size_t(kcols), unsigned(r.n), 1.0f), p1 = normal(size_t(kcols), 7u, 1.0f);
    const Floats d0 = normal(size_t(kcols), unsigned(r.n + 1000), 1.0f),
                 d1 = normal(size_t(kcols), unsigned(r.n + 2000), 1.0f);
    // The passes: dS in place (the rows' valid columns), then rounded, zeros past each row.
    Floats w0 = d0, w1 = d1;
    attention_avx512::softmax_backward_row<false>(w0.data(), p0.data(), r.n - 1, kcols, scale);
    if (n1)
      attention_avx512::softmax_backward_row<false>(w1.data(), p1.data(), n1 - 1, kcols, scale);
    auto rounded = [&](const Floats& x, int n, int j) { return j < n ? cpu_bf16(x[j]) : bf16(0); };
    const int n[2] = {r.n, n1};
    std::vector<bf16> ds0(kcols), ds1(kcols);
    std::vector<uint32_t> dsp(kcols), pp(kcols);
    attention_amx::softmax_grad_pair_bf16(
        ds0.data(), ds1.data(), dsp.data(), pp.data(),
        attention_amx::grad_row(p0.data(), d0.data(), n[0]),
        n1 ? attention_amx::grad_row(p1.data(), d1.data(), n1) : attention_amx::GradRow{}, scale,
        kcols);
    for (int j = 0; j < kcols; j++) {
      const bf16 a = rounded(w0, n[0], j), b = rounded(w1, n[1], j);
      ASSERT_EQ(ds0[j], a) << "n " << r.n << " column " << j;
      ASSERT_EQ(ds1[j], b) << "n " << r.n << " column " << j;
      ASSERT_EQ(dsp[j], uint32_t(a) | uint32_t(b) << 16) << "n " << r.n << " column " << j;
      const uint32_t want_p = uint32_t(rounded(p0, n[0], j)) | uint32_t(rounded(p1, n[1], j)) << 16;
      ASSERT_EQ(pp[j], want_p) << "n " << r.n << " column " << j;
    }
  }
}
#endif

}  // namespace
}  // namespace mt
