// The dense bf16 linears' GEMMs (kernels/dense_gemm_bf16.h): the packed AMX tile path
// against the double reference and against oneDNN within the bf16 bounds of
// tests/kernels/test_bf16.cpp, the packs made once per change of the weights (and never
// read stale), the forced fallback running oneDNN on the plain copy, and the AMX path's
// row independence (the "Row pieces and bits" rule of docs/precision.md).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/kernel_harness.h"
#include "kernels/matmul_bf16.h"
#include "kernels/reference/reference.h"

namespace mt::test {
namespace {

constexpr double kE = 1.0 / 16777216.0;  // fp32 unit roundoff, 2^-24

bool amx() {
  return dense_bf16_path_available(DenseBf16Path::amx);
}
#define MT_NEED_AMX() \
  if (!amx()) GTEST_SKIP() << "no AMX on this CPU: the packed path is AMX's"

// One linear (OC, C) over N rows with its inputs, rounded twins and weight.
struct Case {
  int N, C, OC;
  Buf x, w, bias, dy, dx_in;
  uint64_t version = 0;
  DenseBf16Weight w16;
  Case(int n, int c, int oc)
      : N(n),
        C(c),
        OC(oc),
        x(random_normal(size_t(n) * c, 1)),
        w(random_normal(size_t(oc) * c, 2, 0.3f)),
        bias(random_normal(oc, 3)),
        dy(random_normal(size_t(n) * oc, 4)),
        dx_in(random_normal(size_t(n) * c, 5)),
        w16(c, oc, &version) {}

  Buf forward(DenseBf16Path path, bool with_bias) {
    const ScopedDenseBf16Path use(path);
    Buf out(size_t(N) * OC);
    dense_bf16_forward(out.data(), to_bf16_vec(x).data(), w16, w.data(),
                       with_bias ? bias.data() : nullptr, N);
    return out;
  }
  Buf backward_input(DenseBf16Path path, bool accumulate) {
    const ScopedDenseBf16Path use(path);
    Buf dx = accumulate ? dx_in : Buf(size_t(N) * C, 123.0f);
    dense_bf16_backward_input(dx.data(), to_bf16_vec(dy).data(), w16, w.data(), N, accumulate);
    return dx;
  }
};

// |got - want| <= rel * S per element, S the sum of |terms| (products of the rounded inputs
// plus the bias or the accumulated value): the (K + 1) e S bound of test_bf16.cpp.
void expect_within(const char* what, const Buf& got, const Buf& want, const std::vector<double>& s,
                   double rel) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    ASSERT_LE(err, rel * s[i] + 1e-30) << what << ": element " << i;
  }
}

std::vector<double> forward_scale(const Case& k, bool with_bias) {
  const Buf xr = rounded(k.x), wr = rounded(k.w);
  std::vector<double> s(size_t(k.N) * k.OC, 0.0);
  for (int m = 0; m < k.N; ++m)
    for (int o = 0; o < k.OC; ++o) {
      double acc = with_bias ? std::fabs(k.bias[o]) : 0.0;
      for (int c = 0; c < k.C; ++c)
        acc += std::fabs(xr[size_t(m) * k.C + c] * wr[size_t(o) * k.C + c]);
      s[size_t(m) * k.OC + o] = acc;
    }
  return s;
}

std::vector<double> input_scale(const Case& k, bool accumulate) {
  const Buf dyr = rounded(k.dy), wr = rounded(k.w);
  std::vector<double> s(size_t(k.N) * k.C, 0.0);
  for (int m = 0; m < k.N; ++m)
    for (int c = 0; c < k.C; ++c) {
      double acc = accumulate ? std::fabs(k.dx_in[size_t(m) * k.C + c]) : 0.0;
      for (int o = 0; o < k.OC; ++o)
        acc += std::fabs(dyr[size_t(m) * k.OC + o] * wr[size_t(o) * k.C + c]);
      s[size_t(m) * k.C + c] = acc;
    }
  return s;
}

class DenseGemmBf16Shapes : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// Shapes: the model's (K 256, N 768), rows short of a tile, C and OC off the tile and pack
// multiples (padded K, partial panels), a single row.
TEST_P(DenseGemmBf16Shapes, AmxMatchesTheReferenceAndOneDnnWithinTheBf16Bounds) {
  MT_NEED_AMX();
  const auto [N, C, OC] = GetParam();
  Case k(N, C, OC);
  for (const bool with_bias : {true, false}) {
    Buf ref(size_t(N) * OC);
    ref::matmul_forward(ref.data(), rounded(k.x).data(), rounded(k.w).data(),
                        with_bias ? k.bias.data() : nullptr, N, C, OC);
    const std::vector<double> s = forward_scale(k, with_bias);
    const Buf got = k.forward(DenseBf16Path::amx, with_bias);
    expect_within("forward vs reference", got, ref, s, (C + 1) * kE);
    expect_within("forward vs oneDNN", got, k.forward(DenseBf16Path::onednn, with_bias), s,
                  2 * (C + 1) * kE);
  }
  for (const bool accumulate : {true, false}) {
    Buf ref = accumulate ? k.dx_in : Buf(size_t(N) * C, 0.0f);
    ref::matmul_backward_input(ref.data(), rounded(k.dy).data(), rounded(k.w).data(), N, C, OC);
    const std::vector<double> s = input_scale(k, accumulate);
    const Buf got = k.backward_input(DenseBf16Path::amx, accumulate);
    expect_within("backward_input vs reference", got, ref, s, (OC + 1) * kE);
    expect_within("backward_input vs oneDNN", got,
                  k.backward_input(DenseBf16Path::onednn, accumulate), s, 2 * (OC + 1) * kE);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DenseGemmBf16Shapes,
                         ::testing::Values(std::make_tuple(64, 256, 768),
                                           std::make_tuple(37, 256, 256),
                                           std::make_tuple(50, 72, 40), std::make_tuple(1, 96, 33),
                                           std::make_tuple(130, 1024, 256)));

TEST(DenseGemmBf16, PacksOncePerChangeOfTheWeights) {
  MT_NEED_AMX();
  Case k(48, 64, 96);
  const ScopedDenseBf16Path use(DenseBf16Path::amx);
  EXPECT_EQ(k.w16.packs(), 0);
  for (int use_count = 0; use_count < 3; ++use_count) {  // microbatches, recomputation
    k.forward(DenseBf16Path::amx, true);
    k.backward_input(DenseBf16Path::amx, false);
  }
  EXPECT_EQ(k.w16.packs(), 1) << "both layouts packed once for one version of the weights";
  ++k.version;
  k.backward_input(DenseBf16Path::amx, false);
  k.forward(DenseBf16Path::amx, true);
  EXPECT_EQ(k.w16.packs(), 2);
  // On AMX the memory held is the two packs, the plain copy is never made; the estimate's
  // figure is the packs' size whatever the CPU.
  EXPECT_EQ(k.w16.bytes(), (grouped_bf16_packed_size(GroupedPack::forward, 64, 96) +
                            grouped_bf16_packed_size(GroupedPack::backward_input, 64, 96)) *
                               sizeof(uint32_t));
}

// A change of the weights with the version bumped is read by both products: the results
// equal, bit for bit, those of a weight packed fresh from the new values. A pack kept past
// its version (the staleness this guards against) gives the old weight's results and fails.
TEST(DenseGemmBf16, AChangedWeightIsRepackedNotReadStale) {
  MT_NEED_AMX();
  Case k(40, 64, 80);
  const Buf before_fwd = k.forward(DenseBf16Path::amx, true);
  const Buf before_in = k.backward_input(DenseBf16Path::amx, false);
  for (float& v : k.w) v = -0.5f * v + 0.01f;
  ++k.version;
  Case fresh(40, 64, 80);
  fresh.w = k.w;
  const Buf after_fwd = k.forward(DenseBf16Path::amx, true);
  EXPECT_EQ(after_fwd, fresh.forward(DenseBf16Path::amx, true));
  EXPECT_EQ(k.backward_input(DenseBf16Path::amx, false),
            fresh.backward_input(DenseBf16Path::amx, false));
  EXPECT_NE(after_fwd, before_fwd);
  EXPECT_NE(k.backward_input(DenseBf16Path::amx, false), before_in);
}

// A layer wider than kDenseBf16TilesMaxOut (the LM head at a real vocabulary) runs oneDNN on
// its plain copy even on the amx path: matmul_bf16.h's bits, no packs made, and the memory
// counted is the plain copy's.
TEST(DenseGemmBf16, ALayerWiderThanTheTilesLimitRunsOneDnnOnThePlainCopy) {
  MT_NEED_AMX();
  Case k(16, 64, kDenseBf16TilesMaxOut + 16);
  EXPECT_TRUE(DenseBf16Weight::on_tiles(kDenseBf16TilesMaxOut));
  EXPECT_FALSE(DenseBf16Weight::on_tiles(k.OC));
  const std::vector<bf16> x16 = to_bf16_vec(k.x), w16 = to_bf16_vec(k.w), dy16 = to_bf16_vec(k.dy);
  Buf want(size_t(k.N) * k.OC), want_dx(size_t(k.N) * k.C);
  matmul_bf16_forward(want.data(), x16.data(), w16.data(), k.bias.data(), k.N, k.C, k.OC);
  matmul_bf16_backward_input(want_dx.data(), dy16.data(), w16.data(), k.N, k.C, k.OC, false);
  EXPECT_EQ(k.forward(DenseBf16Path::amx, true), want);
  EXPECT_EQ(k.backward_input(DenseBf16Path::amx, false), want_dx);
  EXPECT_EQ(k.w16.packs(), 0);
  EXPECT_EQ(k.w16.bytes(), size_t(k.C) * k.OC * sizeof(bf16));
}

// The forced fallback runs oneDNN on the plain bf16 copy: the bits of matmul_bf16.h's calls,
// and no packs made.
TEST(DenseGemmBf16, TheForcedFallbackRunsOneDnnOnThePlainCopy) {
  Case k(64, 128, 192);
  if (!dense_bf16_path_available(DenseBf16Path::onednn)) GTEST_SKIP() << "no bf16 matmul here";
  const std::vector<bf16> x16 = to_bf16_vec(k.x), w16 = to_bf16_vec(k.w), dy16 = to_bf16_vec(k.dy);
  Buf want(size_t(k.N) * k.OC), want_dx(size_t(k.N) * k.C);
  matmul_bf16_forward(want.data(), x16.data(), w16.data(), k.bias.data(), k.N, k.C, k.OC);
  matmul_bf16_backward_input(want_dx.data(), dy16.data(), w16.data(), k.N, k.C, k.OC, false);
  EXPECT_EQ(k.forward(DenseBf16Path::onednn, true), want);
  EXPECT_EQ(k.backward_input(DenseBf16Path::onednn, false), want_dx);
  EXPECT_EQ(k.w16.packs(), 0);
  const ScopedDenseBf16Path use(DenseBf16Path::onednn);
  EXPECT_EQ(dense_bf16_path(), DenseBf16Path::onednn);
  EXPECT_NE(dense_bf16_isa().find("oneDNN"), std::string::npos);
}

TEST(DenseGemmBf16, TheDefaultIsTheAmxPathInOneThreadRanksWhereTheCpuHasAmx) {
  EXPECT_EQ(dense_bf16_default_path(1), amx() ? DenseBf16Path::amx : DenseBf16Path::onednn);
  EXPECT_EQ(dense_bf16_default_path(2), DenseBf16Path::onednn) << "a 2-thread rank keeps oneDNN";
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const DenseBf16Path one = dense_bf16_path();
  omp_set_num_threads(2);
  const DenseBf16Path two = dense_bf16_path();
  omp_set_num_threads(saved);
  EXPECT_EQ(one, dense_bf16_default_path(1));
  EXPECT_EQ(two, DenseBf16Path::onednn);
  if (amx()) {
    EXPECT_NE(dense_bf16_isa(DenseBf16Path::amx).find("dense_gemm_bf16"), std::string::npos);
  }
}

// On the AMX path a row's bits depend only on that row and the weight: the first rows of a
// large call equal a call of those rows alone, whatever the count, on 1 and 2 threads.
TEST(DenseGemmBf16, AmxRowsDoNotDependOnTheRowCountOrTheTeam) {
  MT_NEED_AMX();
  Case k(300, 256, 160);
  const Buf whole = k.forward(DenseBf16Path::amx, true);
  const Buf whole_dx = k.backward_input(DenseBf16Path::amx, false);
  for (const int rows : {1, 17, 64, 129})
    for (const int threads : {1, 2}) {
      Case part(rows, 256, 160);
      part.x.assign(k.x.begin(), k.x.begin() + size_t(rows) * 256);
      part.dy.assign(k.dy.begin(), k.dy.begin() + size_t(rows) * 160);
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      const Buf y = part.forward(DenseBf16Path::amx, true);
      const Buf dx = part.backward_input(DenseBf16Path::amx, false);
      omp_set_num_threads(saved);
      EXPECT_TRUE(std::equal(y.begin(), y.end(), whole.begin())) << rows << " rows";
      EXPECT_TRUE(std::equal(dx.begin(), dx.end(), whole_dx.begin())) << rows << " rows";
    }
}

}  // namespace
}  // namespace mt::test
