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
#include "kernels/attention_bf16_avx512.h"
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
  std::vector<float> att(attention_saved_floats(saved, kB, c.T, c.C, c.NH), NAN);
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
    const AttentionSaved form = attention_saved_form(c.bf16, c.C, c.NH);
    if (form == AttentionSaved::probabilities) continue;
    std::mt19937 rng(unsigned(c.T * 131 + c.C));
    std::normal_distribution<float> n(0.0f, 1.5f);
    std::vector<float> qkv(size_t(kB) * c.T * 3 * c.C), dout(size_t(kB) * c.T * c.C);
    for (float& x : qkv) x = n(rng);
    for (float& x : dout) x = n(rng);
    const Outputs p = run(c, qkv, dout, AttentionSaved::probabilities);
    // Both statistics forms where the kernel packs (the saved packing must be what it would
    // have packed again).
    for (AttentionSaved saved : {AttentionSaved::row_stats, form}) {
      const Outputs s = run(c, qkv, dout, saved);
      const std::string at = "T " + std::to_string(c.T) + " hd " + std::to_string(c.C / c.NH) +
                             (c.bf16 ? " bf16" : " fp32") +
                             (saved == AttentionSaved::row_stats_packed ? " packed" : "");
      EXPECT_TRUE(same_bits(p.out, s.out)) << at;
      EXPECT_TRUE(same_bits(p.dqkv, s.dqkv)) << at;
      EXPECT_TRUE(same_bits(p.out16, s.out16)) << at;
      EXPECT_TRUE(same_bits(p.dqkv16, s.dqkv16)) << at;
    }
    ++checked;
  }
  // The fp32 register tiles run wherever AVX-512 does; on a CPU without it nothing recomputes.
  if (attention_saved_form(false, 64, 2) == AttentionSaved::row_stats) {
    EXPECT_GE(checked, 20);
  }
}

// The saved buffer shrinks from (B, NH, T, T) to (B, NH, T, 2) floats, and only where the kernel
// recomputes P (the AMX kernels and the sgemm path keep the probabilities); the AVX512-BF16
// tiles keep their packed q and k besides, (T + 128) hd / 2 words a head at T 128.
TEST(AttentionRowStats, SavedFloats) {
  EXPECT_EQ(attention_saved_floats(AttentionSaved::probabilities, 8, 128, 256, 8),
            size_t(8) * 8 * 128 * 128);
  EXPECT_EQ(attention_saved_floats(AttentionSaved::row_stats, 8, 128, 256, 8),
            size_t(8) * 8 * 128 * 2);
  if (attention_bf16_avx512_supports(32)) {
    EXPECT_EQ(attention_saved_floats(AttentionSaved::row_stats_packed, 8, 128, 256, 8),
              size_t(8) * 8 * (128 * 2 + (128 + 128) * 32 / 2));
  }
  EXPECT_EQ(attention_saved_form(false, 3 * 24, 3), AttentionSaved::probabilities);  // hd 24: sgemm
  for (bool bf16 : {false, true}) {
    const AttentionKernel k = attention_kernel(bf16, 256, 8);
    EXPECT_EQ(attention_saved_form(bf16, 256, 8),
              k == AttentionKernel::bf16_avx512   ? AttentionSaved::row_stats_packed
              : k == AttentionKernel::fp32_avx512 ? AttentionSaved::row_stats
                                                  : AttentionSaved::probabilities);
  }
}

// The backward reads the packing the forward saved, not a packing of its own: spoil the saved
// words between the passes and the gradients change (the same bits as above otherwise).
TEST(AttentionRowStats, BackwardReadsTheSavedPacking) {
  const int T = 40, hd = 32, C = 2 * hd, NH = 2;
  if (attention_saved_form(true, C, NH) != AttentionSaved::row_stats_packed)
    GTEST_SKIP() << "the AVX512-BF16 tiles do not run here";
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 1.5f);
  std::vector<float> qkv(size_t(kB) * T * 3 * C), dout(size_t(kB) * T * C);
  for (float& x : qkv) x = n(rng);
  for (float& x : dout) x = n(rng);
  const AttentionSaved saved = AttentionSaved::row_stats_packed;
  std::vector<float> out(size_t(kB) * T * C), att(attention_saved_floats(saved, kB, T, C, NH));
  attention_forward_bf16(out.data(), att.data(), qkv.data(), kB, T, C, NH, AmxTiles::allow, saved);
  auto backward = [&](const std::vector<float>& a) {
    std::vector<float> dqkv(qkv.size());
    attention_backward_bf16(dqkv.data(), nullptr, dout.data(), qkv.data(), a.data(), kB, T, C, NH,
                            /*accumulate=*/false, AmxTiles::allow, saved);
    return dqkv;
  };
  std::vector<float> spoiled = att;
  const size_t head = att.size() / (kB * NH);  // stats (T, 2), then the packed words
  for (size_t i = 0; i < att.size(); i++)
    if (i % head >= size_t(2 * T)) spoiled[i] = 0.0f;  // the zero pair: all scores 0
  EXPECT_FALSE(same_bits(backward(att), backward(spoiled)));
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
