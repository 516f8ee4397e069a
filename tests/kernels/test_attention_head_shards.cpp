// Tensor parallelism gives each rank NH / tp whole heads: its attention core runs with C / tp
// and NH / tp on its own qkv (B, T, 3C / tp). Each head is independent, so a rank's heads must
// get exactly the bits they get in the whole layer; a kernel choice or offset that depended on
// C or NH rather than on the head dim would make tp differ from one worker by more than the
// order of its fp32 sums. Checked for every bf16 attention entry point the block calls
// (kernels/attention.h), whichever kernel this CPU picks, at the head dims the model tests use,
// and for the fp32 kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/bf16.h"

namespace mt {
namespace {

constexpr int kB = 2, kT = 16;

// Every output of the attention core for one layout (C, NH) of the same heads.
struct Outputs {
  std::vector<float> out, att, dqkv;  // fp32 forms (bf16 products, fp32 results)
  std::vector<bf16> out16, dqkv16;    // the block's bf16 forms
};

Outputs run(const std::vector<float>& qkv, const std::vector<float>& dout, int C, int NH,
            bool bf16_core) {
  Outputs o;
  const size_t rows = size_t(kB) * kT, att = size_t(kB) * NH * kT * kT;
  o.out.resize(rows * C), o.att.resize(att), o.dqkv.resize(rows * 3 * C);
  std::vector<float> scratch(att), stage(rows * 3 * C);
  if (!bf16_core) {
    attention_forward(o.out.data(), o.att.data(), qkv.data(), kB, kT, C, NH);
    attention_backward(o.dqkv.data(), scratch.data(), dout.data(), qkv.data(), o.att.data(), kB, kT,
                       C, NH);
    return o;
  }
  o.out16.resize(rows * C), o.dqkv16.resize(rows * 3 * C);
  attention_forward_bf16(o.out.data(), o.att.data(), qkv.data(), kB, kT, C, NH);
  attention_forward_bf16_out16(o.out16.data(), stage.data(), o.att.data(), qkv.data(), kB, kT, C,
                               NH);
  attention_backward_bf16(o.dqkv.data(), scratch.data(), dout.data(), qkv.data(), o.att.data(), kB,
                          kT, C, NH, /*accumulate=*/false);
  attention_backward_bf16_out16(o.dqkv16.data(), stage.data(), scratch.data(), dout.data(),
                                qkv.data(), o.att.data(), kB, kT, C, NH);
  return o;
}

// Columns [c0, c0 + w) of every section of a row-major (rows, sections * C) tensor.
template <typename T>
std::vector<T> columns(const std::vector<T>& x, int C, int sections, int c0, int w) {
  const size_t rows = x.size() / (size_t(sections) * C);
  std::vector<T> y(rows * sections * w);
  for (size_t r = 0; r < rows; ++r)
    for (int s = 0; s < sections; ++s)
      std::memcpy(&y[(r * sections + s) * w], &x[(r * sections + s) * C + c0], w * sizeof(T));
  return y;
}

// The probabilities of heads [h0, h0 + nh) of (B, NH, T, T).
std::vector<float> heads(const std::vector<float>& att, int NH, int h0, int nh) {
  const size_t tt = size_t(kT) * kT;
  std::vector<float> y;
  for (int b = 0; b < kB; ++b)
    y.insert(y.end(), att.begin() + long((b * NH + h0) * tt),
             att.begin() + long((b * NH + h0 + nh) * tt));
  return y;
}

bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
}

void check_shards(int hd, int NH, int tp, bool bf16_core) {
  const int C = hd * NH, Cl = C / tp, NHl = NH / tp;
  std::mt19937 gen(hd * 131 + NH);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> qkv(size_t(kB) * kT * 3 * C), dout(size_t(kB) * kT * C);
  for (float& x : qkv) x = u(gen);
  for (float& x : dout) x = 0.1f * u(gen);
  const Outputs whole = run(qkv, dout, C, NH, bf16_core);
  for (int rank = 0; rank < tp; ++rank) {
    SCOPED_TRACE("hd " + std::to_string(hd) + " NH " + std::to_string(NH) + " rank " +
                 std::to_string(rank) + (bf16_core ? " bf16" : " fp32"));
    const int c0 = rank * Cl;
    const Outputs shard =
        run(columns(qkv, C, 3, c0, Cl), columns(dout, C, 1, c0, Cl), Cl, NHl, bf16_core);
    EXPECT_TRUE(shard.out == columns(whole.out, C, 1, c0, Cl));
    EXPECT_TRUE(shard.att == heads(whole.att, NH, rank * NHl, NHl));
    EXPECT_TRUE(shard.dqkv == columns(whole.dqkv, C, 3, c0, Cl));
    if (!bf16_core) continue;
    EXPECT_TRUE(same_bits(shard.out16, columns(whole.out16, C, 1, c0, Cl)));
    EXPECT_TRUE(same_bits(shard.dqkv16, columns(whole.dqkv16, C, 3, c0, Cl)));
  }
}

// Head dim 16 is the bf16 layout tests' model (dim 32, 2 heads: one head per rank at tp 2);
// 32 and 64 reach the AMX tile kernel (and at 64 oneDNN's batched matmuls) where the CPU
// has AMX, and the AVX512-BF16 register tiles elsewhere (the fp32 kernels without
// AVX512-BF16: the entry points fall back to them).
TEST(AttentionHeadShards, Bf16RanksHeadsAreTheWholeLayersBits) {
  for (int hd : {16, 32, 64}) {
    check_shards(hd, 2, 2, true);
    check_shards(hd, 4, 2, true);
    check_shards(hd, 4, 4, true);
  }
}

TEST(AttentionHeadShards, Fp32RanksHeadsAreTheWholeLayersBits) {
  for (int hd : {16, 32, 64}) check_shards(hd, 4, 2, false);
}

}  // namespace
}  // namespace mt
