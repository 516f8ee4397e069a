// AttentionSaved::row_stats (kernels/attention.h): the forward keeps each row's maximum and
// 1 / sum instead of the (T, T) probabilities, and the backward recomputes P from them with
// the forward's own products and exp / scale arithmetic. That must be the forward's P bit for
// bit, so every output of the row-statistics forms equals the probabilities forms' bitwise:
// out, dqkv (fp32 and bf16 kernels, fp32 and bf16 outputs), at each compiled head dim and at
// lengths that end inside a 16-lane vector, a 32-key block and a tile of rows.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/bf16.h"

namespace mt {
namespace {

constexpr int kB = 2;

struct Case {
  int T, C, NH;
  bool bf16;
};

// Every output of the attention core in one saved form.
struct Outputs {
  std::vector<float> out, dqkv;
  std::vector<bf16> out16, dqkv16;
};

Outputs run(const Case& c, const std::vector<float>& qkv, const std::vector<float>& dout,
            AttentionSaved saved) {
  const size_t rows = size_t(kB) * c.T;
  Outputs o;
  o.out.resize(rows * c.C), o.dqkv.assign(rows * 3 * c.C, 0.5f);
  // NaN where the form keeps nothing: a row-statistics pass reading P's buffer shows at once.
  std::vector<float> att(attention_saved_floats(saved, kB, c.T, c.NH), NAN);
  std::vector<float> scratch(attention_backward_scratch_floats(kB, c.T, c.C, c.NH, c.bf16));
  std::vector<float> stage(rows * 3 * c.C);
  const AmxTiles amx = AmxTiles::allow;
  if (!c.bf16) {
    attention_forward(o.out.data(), att.data(), qkv.data(), kB, c.T, c.C, c.NH, saved);
    attention_backward(o.dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), kB, c.T,
                       c.C, c.NH, saved);
    return o;
  }
  o.out16.resize(rows * c.C), o.dqkv16.resize(rows * 3 * c.C);
  attention_forward_bf16(o.out.data(), att.data(), qkv.data(), kB, c.T, c.C, c.NH, amx, saved);
  attention_backward_bf16(o.dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), kB,
                          c.T, c.C, c.NH, /*accumulate=*/true, amx, saved);
  attention_forward_bf16_out16(o.out16.data(), stage.data(), att.data(), qkv.data(), kB, c.T, c.C,
                               c.NH, amx, saved);
  attention_backward_bf16_out16(o.dqkv16.data(), stage.data(), scratch.data(), dout.data(),
                                qkv.data(), att.data(), kB, c.T, c.C, c.NH, amx, saved);
  return o;
}

// An empty vector's data() may be null, which memcmp must not be given even for 0 bytes.
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

TEST(AttentionRowStats, RecomputedProbabilitiesGiveTheSameBits) {
  std::vector<Case> cases;
  for (bool bf16 : {false, true})
    for (int hd : {16, 32, 64, 128})
      for (int T : {1, 17, 40, 128, 131}) cases.push_back({T, 2 * hd, 2, bf16});
  int checked = 0;
  for (const Case& c : cases) {
    if (attention_saved_form(c.bf16, c.C, c.NH) != AttentionSaved::row_stats) continue;
    std::mt19937 rng(unsigned(c.T * 131 + c.C));
    std::normal_distribution<float> n(0.0f, 1.5f);
    std::vector<float> qkv(size_t(kB) * c.T * 3 * c.C), dout(size_t(kB) * c.T * c.C);
    for (float& x : qkv) x = n(rng);
    for (float& x : dout) x = n(rng);
    const Outputs p = run(c, qkv, dout, AttentionSaved::probabilities);
    const Outputs s = run(c, qkv, dout, AttentionSaved::row_stats);
    const std::string at = "T " + std::to_string(c.T) + " hd " + std::to_string(c.C / c.NH) +
                           (c.bf16 ? " bf16" : " fp32");
    EXPECT_TRUE(same_bits(p.out, s.out)) << at;
    EXPECT_TRUE(same_bits(p.dqkv, s.dqkv)) << at;
    EXPECT_TRUE(same_bits(p.out16, s.out16)) << at;
    EXPECT_TRUE(same_bits(p.dqkv16, s.dqkv16)) << at;
    ++checked;
  }
  // The fp32 register tiles run wherever AVX-512 does; on a CPU without it nothing recomputes.
  if (attention_saved_form(false, 64, 2) == AttentionSaved::row_stats) {
    EXPECT_GE(checked, 20);
  }
}

// The saved buffer shrinks from (B, NH, T, T) to (B, NH, T, 2) floats, and only where the kernel
// recomputes P (the AMX kernels and the sgemm path keep the probabilities).
TEST(AttentionRowStats, SavedFloats) {
  EXPECT_EQ(attention_saved_floats(AttentionSaved::probabilities, 8, 128, 8),
            size_t(8) * 8 * 128 * 128);
  EXPECT_EQ(attention_saved_floats(AttentionSaved::row_stats, 8, 128, 8), size_t(8) * 8 * 128 * 2);
  EXPECT_EQ(attention_saved_form(false, 3 * 24, 3), AttentionSaved::probabilities);  // hd 24: sgemm
  for (bool bf16 : {false, true}) {
    const AttentionKernel k = attention_kernel(bf16, 256, 8);
    const bool recomputes = k == AttentionKernel::fp32_avx512 || k == AttentionKernel::bf16_avx512;
    EXPECT_EQ(attention_saved_form(bf16, 256, 8),
              recomputes ? AttentionSaved::row_stats : AttentionSaved::probabilities);
  }
}

// Asking a kernel that keeps no statistics for them is the caller's mistake, not silence.
TEST(AttentionRowStats, SgemmPathRefusesRowStats) {
  const int T = 4, C = 24, NH = 1;  // hd 24: the sgemm path
  std::vector<float> qkv(size_t(T) * 3 * C, 0.1f), out(size_t(T) * C), att(size_t(T) * 2);
  EXPECT_ANY_THROW(attention_forward(out.data(), att.data(), qkv.data(), 1, T, C, NH,
                                     AttentionSaved::row_stats));
}

}  // namespace
}  // namespace mt
