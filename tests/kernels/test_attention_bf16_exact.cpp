// The GPT block's AVX512-BF16 register-tile attention (attention_bf16_avx512.cpp), forward and
// backward, bit for bit against attention_bf16_exact_reference.h: the kernel's roundings in its
// order, one scalar chain per element. The other bf16 attention tests compare with an fp32
// reference within a bf16-sized bound, which a score tile scaled by (1 + 1e-4) passes; here a
// single changed bit fails. Head dims 16/32/64/128; lengths that end inside a 16-lane vector, a
// half key block (the diagonal's 16-key tiles), a tile of rows and past one 128-row query block;
// both saved forms (P kept, or recomputed from the row statistics); fp32 and bf16 outputs.
// Where the CPU has no AVX512-BF16 the cases skip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_avx512.h"
#include "kernels/attention_bf16_avx512.h"
#include "kernels/attention_bf16_exact_reference.h"
#include "kernels/bf16.h"

namespace mt {
namespace {

using bf16_exact::HeadRef;

// Index of the first element whose bits differ, or -1; where it is, for the message.
template <typename T>
long first_difference(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return 0;
  for (size_t i = 0; i < got.size(); i++)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) return long(i);
  return -1;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, int cols,
                      const char* what, int T, int hd) {
  const long i = first_difference(got, want);
  EXPECT_EQ(i, -1) << what << " T " << T << " hd " << hd << ": row " << i / cols << " col "
                   << i % cols << " kernel " << (i < 0 ? 0.0f : got[i]) << " reference "
                   << (i < 0 ? 0.0f : want[i]);
}

std::vector<float> normal(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

// One head with q, k, v interleaved in rows of 3 hd, as the qkv activation holds them.
struct OneHead {
  int T, hd;
  std::vector<float> qkv, dout;
  AttentionHead head() const {
    const float* b = qkv.data();
    return {b, b + hd, b + 2 * hd, 3 * hd, T, hd, 1.0f / std::sqrt(float(hd))};
  }
  HeadRef ref() const {
    const AttentionHead h = head();
    return {h.q, h.k, h.v, h.ld, T, hd, h.scale};
  }
};

OneHead make_head(int T, int hd) {
  return {T, hd, normal(size_t(T) * 3 * hd, unsigned(T * 7 + hd)),
          normal(size_t(T) * hd, unsigned(T * 11 + hd + 1))};
}

const int kLengths[] = {1, 2, 17, 40, 53, 128, 131};

TEST(AttentionBf16Exact, DotProductInstructionMatchesTheSdm) {
  if (!attention_bf16_avx512_supports(128)) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  // A one-row head keeps its single score as the row maximum (the row-statistics form): one
  // chain of 64 vdpbf16ps times the scale. If the CPU added a pair in another order or with
  // one rounding, the reference's model (bf16_dot_pair) would be wrong, and this says so
  // where every exact case below would only report a differing bit.
  for (int trial = 0; trial < 500; trial++) {
    const OneHead o{1, 128, normal(3 * 128, unsigned(1000 + trial)), {}};
    std::vector<float> out(128), stats(2);
    attention_head_forward_bf16(o.head(), out.data(), 128, nullptr, stats.data());
    const std::vector<float> q = bf16_exact::rounded(o.qkv.data(), 0, 1, 128);
    const std::vector<float> k = bf16_exact::rounded(o.qkv.data() + 128, 0, 1, 128);
    const float want = bf16_exact::dot_chain(q.data(), k.data(), 128) * o.head().scale;
    ASSERT_EQ(std::memcmp(&stats[0], &want, sizeof want), 0)
        << "trial " << trial << ": score " << stats[0] << ", the SDM's order gives " << want;
  }
}

TEST(AttentionBf16Exact, HeadForwardAndBackwardGiveTheReferenceBits) {
  int checked = 0;
  for (int hd : {16, 32, 64, 128}) {
    if (!attention_bf16_avx512_supports(hd)) continue;
    for (int T : kLengths) {
      const OneHead o = make_head(T, hd);
      const AttentionHead h = o.head();
      const bf16_exact::ForwardRef f = bf16_exact::forward(o.ref());
      const bf16_exact::BackwardRef b = bf16_exact::backward(o.ref(), o.dout.data(), hd, f.p);
      // 0: probabilities, 1: row statistics, 2: and the forward's packed q and k.
      for (int form : {0, 1, 2}) {
        const bool stats_form = form > 0;
        std::vector<float> out(size_t(T) * hd, NAN), att(size_t(T) * T, NAN), stats(2 * T);
        std::vector<uint32_t> packed(attention_bf16_avx512_packed_words(T, hd), 0xFFFFFFFFu);
        float* st = stats_form ? stats.data() : nullptr;
        uint32_t* pk = form == 2 ? packed.data() : nullptr;
        attention_head_forward_bf16(h, out.data(), hd, stats_form ? nullptr : att.data(), st, pk);
        expect_same_bits(out, f.out, hd, "out", T, hd);
        if (!stats_form) expect_same_bits(att, f.p, T, "P", T, hd);
        std::vector<float> dq(size_t(T) * hd, NAN), dk = dq, dv = dq;
        attention_head_backward_bf16(h, dq.data(), dk.data(), dv.data(), hd, o.dout.data(), hd,
                                     stats_form ? nullptr : att.data(), /*accumulate=*/false, st,
                                     pk);
        expect_same_bits(dq, b.dq, hd, "dq", T, hd);
        expect_same_bits(dk, b.dk, hd, "dk", T, hd);
        expect_same_bits(dv, b.dv, hd, "dv", T, hd);
        checked++;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
}

// The layer's entry points (attention.h) where they run this kernel on this CPU: several
// sequences and heads in the fused qkv layout, fp32 and bf16 outputs, the saved form the
// engine picks. Each head's slice must be the one-head reference's bits.
TEST(AttentionBf16Exact, LayerEntryPointsGiveTheReferenceBitsPerHead) {
  constexpr int B = 2, NH = 3;
  int checked = 0;
  for (int hd : {32, 64, 128}) {
    const int C = NH * hd;
    if (attention_kernel(true, C, NH) != AttentionKernel::bf16_avx512) continue;
    for (int T : {17, 53, 128}) {
      const std::vector<float> qkv = normal(size_t(B) * T * 3 * C, unsigned(T + hd));
      const std::vector<float> dout = normal(size_t(B) * T * C, unsigned(T + hd + 5));
      const AttentionSaved saved = attention_saved_form(true, C, NH);
      std::vector<float> out(size_t(B) * T * C), dqkv(size_t(B) * T * 3 * C);
      std::vector<float> att(attention_saved_floats(saved, B, T, C, NH));
      std::vector<float> scratch(attention_backward_scratch_floats(B, T, C, NH, true));
      std::vector<float> stage(dqkv.size());
      std::vector<bf16> out16(out.size()), dqkv16(dqkv.size());
      attention_forward_bf16(out.data(), att.data(), qkv.data(), B, T, C, NH, AmxTiles::allow,
                             saved);
      attention_backward_bf16(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B,
                              T, C, NH, /*accumulate=*/false, AmxTiles::allow, saved);
      attention_forward_bf16_out16(out16.data(), stage.data(), att.data(), qkv.data(), B, T, C, NH,
                                   AmxTiles::allow, saved);
      attention_backward_bf16_out16(dqkv16.data(), stage.data(), scratch.data(), dout.data(),
                                    qkv.data(), att.data(), B, T, C, NH, AmxTiles::allow, saved);
      for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
          const size_t r0 = size_t(b) * T;
          const HeadRef hr{&qkv[r0 * 3 * C + h * hd],
                           &qkv[r0 * 3 * C + C + h * hd],
                           &qkv[r0 * 3 * C + 2 * C + h * hd],
                           3 * C,
                           T,
                           hd,
                           1.0f / std::sqrt(float(hd))};
          const bf16_exact::ForwardRef f = bf16_exact::forward(hr);
          const bf16_exact::BackwardRef g =
              bf16_exact::backward(hr, &dout[r0 * C + h * hd], C, f.p);
          // The kernel's slices, gathered into (T, hd).
          auto slice = [&](const auto& m, int ld, int col) {
            std::vector<float> s(size_t(T) * hd);
            for (int t = 0; t < T; t++)
              for (int d = 0; d < hd; d++) {
                const auto x = m[(r0 + t) * ld + col + d];
                if constexpr (std::is_same_v<std::decay_t<decltype(x)>, bf16>)
                  s[size_t(t) * hd + d] = bf16_to_float(x);
                else
                  s[size_t(t) * hd + d] = x;
              }
            return s;
          };
          auto rounded = [](std::vector<float> v) {
            for (float& x : v) x = bf16_to_float(float_to_bf16(x));
            return v;
          };
          expect_same_bits(slice(out, C, h * hd), f.out, hd, "layer out", T, hd);
          expect_same_bits(slice(dqkv, 3 * C, h * hd), g.dq, hd, "layer dq", T, hd);
          expect_same_bits(slice(dqkv, 3 * C, C + h * hd), g.dk, hd, "layer dk", T, hd);
          expect_same_bits(slice(dqkv, 3 * C, 2 * C + h * hd), g.dv, hd, "layer dv", T, hd);
          expect_same_bits(slice(out16, C, h * hd), rounded(f.out), hd, "out16", T, hd);
          expect_same_bits(slice(dqkv16, 3 * C, h * hd), rounded(g.dq), hd, "dq16", T, hd);
          expect_same_bits(slice(dqkv16, 3 * C, C + h * hd), rounded(g.dk), hd, "dk16", T, hd);
          expect_same_bits(slice(dqkv16, 3 * C, 2 * C + h * hd), rounded(g.dv), hd, "dv16", T, hd);
          checked++;
        }
    }
  }
  if (checked == 0) GTEST_SKIP() << "the engine does not run the AVX512-BF16 tiles on this CPU";
}

}  // namespace
}  // namespace mt
