// The dense bf16 linears' epilogues in the AMX tiles' stores (kernels/dense_gemm_bf16_amx.h):
// the bias as the tiles' start, the GPT MLP's GELU forward and its gradient beside the GEMMs.
// Their values equal the unfused composition on the same tiles bit for bit (GEMM, then
// kernels/gelu.h's fp32 pass, then the rounding); the fused calls make no activation pass of
// their own (counted with the phase profile, never timed), and the rows do not depend on the
// row count or the team.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/gelu.h"
#include "kernels/grouped_gemm.h"
#include "kernels/kernel_harness.h"
#include "kernels/matmul_bf16.h"
#include "kernels/phase_profile.h"
#include "kernels/phase_totals_of.h"

namespace mt::test {
namespace {

bool amx() {
  return dense_bf16_path_available(DenseBf16Path::amx);
}
#define MT_NEED_AMX() \
  if (!amx()) GTEST_SKIP() << "no AMX on this CPU: the fused epilogues are the tiles'"

std::vector<uint16_t> bits(const std::vector<bf16>& v) {
  return std::vector<uint16_t>(v.begin(), v.end());
}

// The fc (H, C) of an MLP and the projection (C, H) back, over N rows.
struct Mlp {
  int N, C, H;
  Buf x, w_fc, b_fc, w_proj, dy;
  std::vector<bf16> x16, dy16;  // x and dy rounded (round() after changing them)
  uint64_t version = 0;
  DenseBf16Weight fc, proj;
  Mlp(int n, int c, int h)
      : N(n),
        C(c),
        H(h),
        x(random_normal(size_t(n) * c, 11)),
        w_fc(random_normal(size_t(h) * c, 12, 0.2f)),
        b_fc(random_normal(h, 13, 0.5f)),
        w_proj(random_normal(size_t(c) * h, 14, 0.2f)),
        dy(random_normal(size_t(n) * c, 15)),
        fc(c, h, &version),
        proj(h, c, &version) {
    round();
  }
  void round() { x16 = to_bf16_vec(x), dy16 = to_bf16_vec(dy); }

  // The fused forward: pre (N, H) and act (N, H).
  void forward_gelu(Buf& pre, std::vector<bf16>& act) {
    pre.assign(size_t(N) * H, 0.0f), act.assign(size_t(N) * H, bf16(0));
    dense_bf16_forward_gelu(pre.data(), act.data(), x16.data(), fc, w_fc.data(), b_fc.data(), N);
  }
  // The fused input gradient through the projection and GELU's gradient at pre.
  std::vector<bf16> backward_dgelu(const Buf& pre) {
    std::vector<bf16> d(size_t(N) * H);
    Buf stage(size_t(N) * H);
    dense_bf16_backward_input_dgelu(d.data(), pre.data(), dy16.data(), proj, w_proj.data(), N,
                                    stage.data());
    return d;
  }
};

// Shapes: the model's (C 256, H 1024), rows short of a tile, K not a multiple of 32 (72) and
// outputs short of a panel (40), one row.
class DenseGemmBf16Epilogue : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(DenseGemmBf16Epilogue, FusedGeluEqualsTheCompositionOnTheSameTilesBitForBit) {
  MT_NEED_AMX();
  const auto [N, C, H] = GetParam();
  const ScopedDenseBf16Path tiles(DenseBf16Path::amx);
  Mlp m(N, C, H);
  Buf pre;
  std::vector<bf16> act;
  m.forward_gelu(pre, act);
  // pre: the plain forward with its bias (the same tiles, started from the same bias).
  Buf want_pre(size_t(N) * H);
  dense_bf16_forward(want_pre.data(), to_bf16_vec(m.x).data(), m.fc, m.w_fc.data(), m.b_fc.data(),
                     N);
  ASSERT_EQ(0, std::memcmp(pre.data(), want_pre.data(), pre.size() * sizeof(float)));
  // act: gelu's fp32 pass over pre, then rounded.
  Buf g(pre.size());
  gelu_forward(g.data(), pre.data(), g.size());
  EXPECT_EQ(bits(act), bits(to_bf16_vec(g)));

  // The backward: the plain input gradient, GELU's fp32 gradient pass over it, rounded.
  Buf prod(size_t(N) * H);
  dense_bf16_backward_input(prod.data(), to_bf16_vec(m.dy).data(), m.proj, m.w_proj.data(), N,
                            false);
  gelu_backward(prod.data(), pre.data(), prod.data(), prod.size());
  EXPECT_EQ(bits(m.backward_dgelu(pre)), bits(to_bf16_vec(prod)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, DenseGemmBf16Epilogue,
                         ::testing::Values(std::make_tuple(64, 256, 1024),
                                           std::make_tuple(37, 72, 40), std::make_tuple(1, 96, 33),
                                           std::make_tuple(130, 128, 512)));

// Without the tiles the composition runs: the same values as the unfused kernels there. On
// a routine that adds the bias itself (the primitive; the mixed path's forwards with a
// bias) pre is the plain forward with its bias and GELU's pass only reads it; on the gemm
// routine alone the pass adds the bias.
TEST(DenseGemmBf16EpilogueFallback, OneDnnRunsTheComposition) {
  if (!dense_bf16_path_available(DenseBf16Path::onednn)) GTEST_SKIP() << "no bf16 matmul here";
  const ScopedDenseBf16Path onednn(DenseBf16Path::onednn);
  for (const Bf16GemmPath routine :
       {Bf16GemmPath::primitive, Bf16GemmPath::jit_gemm, Bf16GemmPath::mixed}) {
    if (!matmul_bf16_path_available(routine)) continue;
    SCOPED_TRACE(int(routine));
    const ScopedBf16GemmPath use(routine);
    Mlp m(50, 64, 96);
    Buf pre;
    std::vector<bf16> act;
    m.forward_gelu(pre, act);
    Buf want_pre(pre.size());
    std::vector<bf16> want_act(act.size());
    const std::vector<bf16> x16 = to_bf16_vec(m.x);
    if (routine == Bf16GemmPath::jit_gemm) {
      dense_bf16_forward(want_pre.data(), x16.data(), m.fc, m.w_fc.data(), nullptr, m.N);
      bias_gelu_forward_bf16(want_act.data(), want_pre.data(), m.b_fc.data(), m.N, m.H);
    } else {
      dense_bf16_forward(want_pre.data(), x16.data(), m.fc, m.w_fc.data(), m.b_fc.data(), m.N);
      Buf g(pre.size());
      gelu_forward(g.data(), want_pre.data(), g.size());
      want_act = to_bf16_vec(g);
    }
    EXPECT_EQ(0, std::memcmp(pre.data(), want_pre.data(), pre.size() * sizeof(float)));
    EXPECT_EQ(bits(act), bits(want_act));
  }
}

// Activation passes and GEMM calls of one fused forward and backward.
PhaseTotals phases_of(Mlp& m) {
  Buf pre;
  std::vector<bf16> act;
  return phases_of_second_run([&] {
    m.forward_gelu(pre, act);
    (void)m.backward_dgelu(pre);
  });
}

TEST(DenseGemmBf16EpilogueTraffic, GeluRunsInTheTilesStoresNotAsAPassOfItsOwn) {
  MT_NEED_AMX();
  Mlp m(64, 128, 512);
  {
    const ScopedDenseBf16Path tiles(DenseBf16Path::amx);
    const PhaseTotals t = phases_of(m);
    EXPECT_EQ(t.calls[int(Phase::activation)], 0u);
    EXPECT_EQ(t.calls[int(Phase::conversion)], 0u);
    EXPECT_EQ(t.calls[int(Phase::gemm)], 2u);
  }
  if (dense_bf16_path_available(DenseBf16Path::onednn)) {
    const ScopedDenseBf16Path onednn(DenseBf16Path::onednn);
    EXPECT_EQ(phases_of(m).calls[int(Phase::activation)], 2u);  // the composition's passes
  }
}

// On oneDNN, where the routine adds the bias itself (the primitive, and the mixed path's
// forwards with a bias), GELU's forward pass only reads pre (6 bytes a value: pre in, act
// out) instead of adding the bias and writing pre back (10); the backward pass is the same
// (pre and the product in, d_fc out: 10). Counted with the phase profile.
TEST(DenseGemmBf16EpilogueTraffic, OnOneDnnGeluReadsPreWithTheBiasAlreadyIn) {
  if (!dense_bf16_path_available(DenseBf16Path::onednn)) GTEST_SKIP() << "no bf16 matmul here";
  const ScopedDenseBf16Path onednn(DenseBf16Path::onednn);
  Mlp m(64, 128, 512);
  const double values = double(m.N) * m.H;
  for (const Bf16GemmPath routine :
       {Bf16GemmPath::primitive, Bf16GemmPath::jit_gemm, Bf16GemmPath::mixed}) {
    if (!matmul_bf16_path_available(routine)) continue;
    SCOPED_TRACE(int(routine));
    const ScopedBf16GemmPath use(routine);
    const PhaseTotals t = phases_of(m);
    EXPECT_EQ(t.calls[int(Phase::activation)], 2u);
    const double forward = routine == Bf16GemmPath::jit_gemm ? 10 : 6;
    EXPECT_EQ(t.bytes[int(Phase::activation)], (forward + 10) * values);
  }
}

// A fused row's bits depend only on that row: the first rows of a large call equal a call of
// those rows alone, on 1 and 2 threads (the driver splits rows and columns over the team).
TEST(DenseGemmBf16EpilogueRows, DoNotDependOnTheRowCountOrTheTeam) {
  MT_NEED_AMX();
  const ScopedDenseBf16Path tiles(DenseBf16Path::amx);
  Mlp whole(300, 128, 160);
  Buf pre;
  std::vector<bf16> act;
  whole.forward_gelu(pre, act);
  const std::vector<bf16> d = whole.backward_dgelu(pre);
  for (const int rows : {1, 17, 64, 129})
    for (const int threads : {1, 2}) {
      Mlp part(rows, 128, 160);
      part.x.assign(whole.x.begin(), whole.x.begin() + size_t(rows) * 128);
      part.dy.assign(whole.dy.begin(), whole.dy.begin() + size_t(rows) * 128);
      part.round();
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      Buf p;
      std::vector<bf16> a;
      part.forward_gelu(p, a);
      const std::vector<bf16> dp = part.backward_dgelu(p);
      omp_set_num_threads(saved);
      EXPECT_TRUE(std::equal(p.begin(), p.end(), pre.begin())) << rows << " rows";
      EXPECT_TRUE(std::equal(a.begin(), a.end(), act.begin())) << rows << " rows";
      EXPECT_TRUE(std::equal(dp.begin(), dp.end(), d.begin())) << rows << " rows";
    }
}

// The two packs, made in one pass over the fp32 weight (blocks of rows rounded in a small
// buffer and packed from there, spread over the team), equal grouped_bf16_pack over the
// whole bf16 copy: shapes off the 16-column panels and the 32-row pair blocks, 1 and 2 threads.
TEST(DenseGemmBf16Packs, OnePassOverTheWeightEqualsTheBf16CopyPacked) {
  MT_NEED_AMX();
  const ScopedDenseBf16Path tiles(DenseBf16Path::amx);
  for (const auto& [C, OC] : {std::pair{256, 768}, std::pair{72, 40}, std::pair{33, 97},
                              std::pair{1024, 256}, std::pair{16, 1}})
    for (const int threads : {1, 2}) {
      const Buf w = random_normal(size_t(OC) * C, 21);
      uint64_t version = 1;
      DenseBf16Weight w16(C, OC, &version);
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      const uint32_t* got[2] = {w16.packed(w.data(), GroupedPack::forward),
                                w16.packed(w.data(), GroupedPack::backward_input)};
      omp_set_num_threads(saved);
      const std::vector<bf16> copy = to_bf16_vec(w);
      for (const GroupedPack which : {GroupedPack::forward, GroupedPack::backward_input}) {
        std::vector<uint32_t> want(grouped_bf16_packed_size(which, C, OC));
        grouped_bf16_pack(want.data(), which, copy.data(), C, OC);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), got[int(which)]))
            << "C " << C << " OC " << OC << " pack " << int(which) << ", " << threads
            << " thread(s)";
      }
    }
}

}  // namespace
}  // namespace mt::test
