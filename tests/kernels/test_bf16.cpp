// bf16 conversion and the bf16 matmul against their fp32 twins.
//
// Bounds (u = 2^-8, the unit roundoff of bf16's 8-bit significand (7 stored) under
// round-to-nearest;
// e = 2^-24, fp32's; for an output element, S = sum over k of |a_k b_k|, the products of
// the *unrounded* inputs):
//   - vs the double reference on the same bf16-rounded inputs: |err| <= (K + 1) e S'
//     (S' over the rounded inputs). The products of two bf16 values are exact in fp32, so
//     what is left is fp32 accumulation of K terms (+1 for the += of the backward calls):
//     the standard gamma_K bound. A kernel that accumulated in bf16 would be off by ~u
//     per addition, 2^16 times this for K = 1, and fails it.
//   - vs the fp32 kernel on the unrounded inputs: |err| <= (2u + u^2 + 2 (K + 1) e) S.
//     Rounding both factors changes each product by at most (2u + u^2) of it; each side
//     adds its own fp32 accumulation error.
// Both are per element and worst case, so they hold for any data, not just on average.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/gelu.h"
#include "kernels/kernel_harness.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "kernels/reference/reference.h"

namespace mt::test {
namespace {

constexpr double kU = 1.0 / 256;         // bf16 unit roundoff, 2^-8
constexpr double kE = 1.0 / 16777216.0;  // fp32 unit roundoff, 2^-24

float bits_to_float(uint32_t u) {
  return std::bit_cast<float>(u);
}

// ---- conversion ----------------------------------------------------------------------------

TEST(Bf16Conversion, RoundsToNearestEvenAsTorch) {
  // Expected bits follow c10::BFloat16's round_to_nearest_even.
  struct Case {
    uint32_t in;
    uint16_t out;
  } cases[] = {
      {0x3F800000, 0x3F80},  // 1.0 exact
      {0x3F808000, 0x3F80},  // 1 + 2^-8: a tie, to the even 0x3F80
      {0x3F818000, 0x3F82},  // a tie above an odd value: up to the even 0x3F82
      {0x3F808001, 0x3F81},  // just above the tie: up
      {0x3F807FFF, 0x3F80},  // just below: down
      {0xBF808001, 0xBF81},  // negative: magnitude rounds the same way
      {0x7F7FFFFF, 0x7F80},  // the largest float rounds to +inf
      {0x7F800000, 0x7F80},  // +inf
      {0xFF800000, 0xFF80},  // -inf
      {0x7FC00000, 0x7FC0},  // quiet NaN
      {0xFFC00001, 0x7FC0},  // negative NaN with payload: torch's canonical NaN
      {0x7F800001, 0x7FC0},  // signalling NaN whose payload would round to inf: still NaN
      {0x00018000, 0x0002},  // a denormal tie, odd below: up (no flush to zero)
      {0x00008000, 0x0000},  // a denormal tie, even below: down to +0
      {0x80000000, 0x8000},  // -0 keeps its sign
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_bf16(bits_to_float(c.in)), c.out) << std::hex << "input 0x" << c.in;
  }
}

TEST(Bf16Conversion, IsTheNearestBf16OfRandomFloats) {
  // For finite inputs the result is the nearer of the two bf16 neighbours (ties: even).
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Finite and positive, below the last bf16 binade's top (where rounding up is to inf,
    // checked in RoundsToNearestEvenAsTorch).
    const uint32_t u = rng() & 0x7FFFFFFFu;
    if (u >= 0x7F7F0000u) continue;
    const float f = bits_to_float(u);
    const uint16_t got = float_to_bf16(f);
    const double lo = bf16_to_float(uint16_t(u >> 16)), hi = bf16_to_float(uint16_t((u >> 16) + 1));
    const double dlo = double(f) - lo, dhi = hi - double(f);
    const uint16_t want = dlo < dhi ? uint16_t(u >> 16)
                          : dhi < dlo
                              ? uint16_t((u >> 16) + 1)
                              : ((u >> 16) % 2 == 0 ? uint16_t(u >> 16) : uint16_t((u >> 16) + 1));
    ASSERT_EQ(got, want) << std::hex << "input 0x" << u;
  }
}

TEST(Bf16Conversion, ArrayKernelsMatchTheScalarRule) {
  // Large enough for the threaded path, odd length for the vector tail, specials mixed in.
  const size_t n = (size_t(1) << 17) + 13;
  Buf x = random_normal(n, 11, 3.0f);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[6] = std::numeric_limits<float>::infinity();
  x[7] = -0.0f;
  x[8] = bits_to_float(0x00018000);
  // One special per 16-lane vector too, so each takes the exact rule alone, and overflow in a
  // vector of normal values (the conversion instruction's path where there is one).
  x[20] = bits_to_float(0xFF800001);  // a negative signalling NaN with a payload
  x[40] = bits_to_float(0x807FFFFF);  // a denormal that rounds to -FLT_MIN
  x[60] = bits_to_float(0x7F7FFFFF);  // FLT_MAX: rounds up to infinity
  x[61] = bits_to_float(0x7F7F8000);  // a tie at the top: to even (infinity)
  x[n - 1] = bits_to_float(0x3F808000);
  std::vector<bf16> h(n);
  to_bf16(h.data(), x.data(), n);
  Buf back(n), rounded = x;
  from_bf16(back.data(), h.data(), n);
  round_to_bf16(rounded.data(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i], float_to_bf16(x[i])) << "element " << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), uint32_t(h[i]) << 16) << "element " << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(rounded[i]), std::bit_cast<uint32_t>(back[i]));
  }
  // Rounding is idempotent: a bf16 value converts back to itself.
  std::vector<bf16> again(n);
  to_bf16(again.data(), back.data(), n);
  EXPECT_EQ(again, h);
}

// ---- matmul ----------------------------------------------------------------------------

struct Shape {
  int N, C, OC;
};

// The per-element scale S of C (M, N) = op(A) (M, K) @ op(B) (K, N): sum |a||b|, with
// a(m, k) and b(k, n) given as functions.
template <typename FA, typename FB>
std::vector<double> abs_products(int M, int N, int K, FA a, FB b) {
  std::vector<double> s(size_t(M) * N, 0.0);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      const double am = std::fabs(a(m, k));
      if (am == 0) continue;
      for (int n = 0; n < N; ++n) s[size_t(m) * N + n] += am * std::fabs(b(k, n));
    }
  return s;
}

// Checks |got - want| <= rel * scale (+ a denormal-sized floor) per element; returns the
// largest ratio err / (rel * scale) for the log.
double check_bound(const char* what, const Buf& got, const Buf& want,
                   const std::vector<double>& scale, double rel) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    const double bound = rel * scale[i] + 1e-30;
    worst = std::max(worst, err / bound);
    if (err > bound) {
      ADD_FAILURE() << what << ": element " << i << " off by " << err << " > bound " << bound
                    << " (got " << got[i] << ", want " << want[i] << ")";
      return worst;
    }
  }
  return worst;
}

// Where oneDNN has no bf16 matmul (a CPU without AVX-512) --precision bf16 is refused, and
// the GEMM tests skip (tests/suite/allowed_skips.txt allows it on such a CPU only).
constexpr const char* kNoBf16Gemm = "no oneDNN bf16 matmul on this CPU (needs AVX-512)";

const char* path_name(Bf16GemmPath path) {
  return path == Bf16GemmPath::primitive ? "primitive"
         : path == Bf16GemmPath::mixed   ? "mixed"
                                         : "jit_gemm";
}

// Both GEMM routines are held to the same bounds (matmul_bf16.h); a routine this machine
// does not have is skipped.
class Bf16Matmul : public ::testing::TestWithParam<std::tuple<Shape, Bf16GemmPath>> {};

TEST_P(Bf16Matmul, MatchesFp32TwinsWithinTheRoundingBounds) {
  const auto [shape, path] = GetParam();
  if (!bf16_matmul_supported()) GTEST_SKIP() << kNoBf16Gemm;
  if (!matmul_bf16_path_available(path)) GTEST_SKIP() << path_name(path) << " not available";
  const ScopedBf16GemmPath use(path);
  const auto [N, C, OC] = shape;
  const Buf x = random_normal(size_t(N) * C, 1), w = random_normal(size_t(OC) * C, 2, 0.3f),
            bias = random_normal(OC, 3), dy = random_normal(size_t(N) * OC, 4),
            acc_in = random_normal(size_t(OC) * C, 5), dx_in = random_normal(size_t(N) * C, 6),
            db_in = random_normal(OC, 7);
  const std::vector<bf16> x16 = to_bf16_vec(x), w16 = to_bf16_vec(w), dy16 = to_bf16_vec(dy);
  const Buf xr = rounded(x), wr = rounded(w), dyr = rounded(dy);
  const double ref_rel_fwd = (C + 1) * kE, ref_rel_in = (OC + 1) * kE, ref_rel_w = (N + 1) * kE;
  auto fp32_rel_k = [](int K) { return 2 * kU + kU * kU + 2 * (K + 1) * kE; };
  double worst = 0;

  // forward: out = x @ w^T + bias.
  {
    Buf got(size_t(N) * OC), ref(got.size()), f32(got.size());
    matmul_bf16_forward(got.data(), x16.data(), w16.data(), bias.data(), N, C, OC);
    ref::matmul_forward(ref.data(), xr.data(), wr.data(), bias.data(), N, C, OC);
    matmul_forward(f32.data(), x.data(), w.data(), bias.data(), N, C, OC);
    // The bias joins the sum as one more term of size |bias|.
    auto sr = abs_products(
        N, OC, C, [&](int m, int k) { return xr[size_t(m) * C + k]; },
        [&](int k, int n) { return wr[size_t(n) * C + k]; });
    auto s = abs_products(
        N, OC, C, [&](int m, int k) { return x[size_t(m) * C + k]; },
        [&](int k, int n) { return w[size_t(n) * C + k]; });
    for (int m = 0; m < N; ++m)
      for (int o = 0; o < OC; ++o) {
        sr[size_t(m) * OC + o] += std::fabs(bias[o]);
        s[size_t(m) * OC + o] += std::fabs(bias[o]);
      }
    worst = std::max(worst, check_bound("forward vs reference", got, ref, sr, ref_rel_fwd));
    check_bound("forward vs fp32", got, f32, s, fp32_rel_k(C));
  }
  // backward_input: dx += dy @ w.
  {
    Buf got = dx_in, ref = dx_in, f32 = dx_in;
    matmul_bf16_backward_input(got.data(), dy16.data(), w16.data(), N, C, OC);
    ref::matmul_backward_input(ref.data(), dyr.data(), wr.data(), N, C, OC);
    matmul_backward_input(f32.data(), dy.data(), w.data(), N, C, OC);
    auto sr = abs_products(
        N, C, OC, [&](int m, int k) { return dyr[size_t(m) * OC + k]; },
        [&](int k, int n) { return wr[size_t(k) * C + n]; });
    auto s = abs_products(
        N, C, OC, [&](int m, int k) { return dy[size_t(m) * OC + k]; },
        [&](int k, int n) { return w[size_t(k) * C + n]; });
    for (size_t i = 0; i < s.size(); ++i) sr[i] += std::fabs(dx_in[i]), s[i] += std::fabs(dx_in[i]);
    worst = std::max(worst, check_bound("backward_input vs reference", got, ref, sr, ref_rel_in));
    check_bound("backward_input vs fp32", got, f32, s, fp32_rel_k(OC));
    // Overwriting: whatever dinp held is gone, and the result is the product alone, equal to
    // accumulating onto zeros.
    Buf over(dx_in.size(), std::numeric_limits<float>::quiet_NaN()), zero_acc(dx_in.size(), 0.0f);
    matmul_bf16_backward_input(over.data(), dy16.data(), w16.data(), N, C, OC, false);
    matmul_bf16_backward_input(zero_acc.data(), dy16.data(), w16.data(), N, C, OC);
    EXPECT_EQ(normalised_error(over, zero_acc), 0.0);
  }
  // backward_weight: dw += dy^T @ x, db += column sums of dy.
  {
    Buf got = acc_in, ref = acc_in, f32 = acc_in;
    Buf gdb = db_in, rdb = db_in, fdb = db_in;
    matmul_bf16_backward_weight(got.data(), gdb.data(), dy16.data(), x16.data(), N, C, OC);
    ref::matmul_backward_weight(ref.data(), rdb.data(), dyr.data(), xr.data(), N, C, OC);
    matmul_backward_weight(f32.data(), fdb.data(), dy.data(), x.data(), N, C, OC);
    auto sr = abs_products(
        OC, C, N, [&](int m, int k) { return dyr[size_t(k) * OC + m]; },
        [&](int k, int n) { return xr[size_t(k) * C + n]; });
    auto s = abs_products(
        OC, C, N, [&](int m, int k) { return dy[size_t(k) * OC + m]; },
        [&](int k, int n) { return x[size_t(k) * C + n]; });
    for (size_t i = 0; i < s.size(); ++i)
      sr[i] += std::fabs(acc_in[i]), s[i] += std::fabs(acc_in[i]);
    worst = std::max(worst, check_bound("backward_weight vs reference", got, ref, sr, ref_rel_w));
    check_bound("backward_weight vs fp32", got, f32, s, fp32_rel_k(N));
    // The bias gradient: N bf16 values summed in fp32 (one "product" per term, exact).
    auto br = abs_products(
        OC, 1, N, [&](int m, int k) { return dyr[size_t(k) * OC + m]; },
        [](int, int) { return 1.0; });
    auto b = abs_products(
        OC, 1, N, [&](int m, int k) { return dy[size_t(k) * OC + m]; },
        [](int, int) { return 1.0; });
    for (int o = 0; o < OC; ++o) br[o] += std::fabs(db_in[o]), b[o] += std::fabs(db_in[o]);
    worst = std::max(worst, check_bound("dbias vs reference", gdb, rdb, br, ref_rel_w));
    check_bound("dbias vs fp32", gdb, fdb, b, kU + 2 * (N + 1) * kE);
  }
  RecordProperty("worst_ratio_to_reference_bound", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Bf16Matmul,
    ::testing::Combine(
        ::testing::Values(Shape{1, 1, 1}, Shape{1, 7, 3}, Shape{5, 17, 9}, Shape{33, 64, 48},
                          Shape{7, 3, 1000}, Shape{128, 256, 768}, Shape{64, 768, 256},
                          Shape{64, 512, 2048}, Shape{300, 96, 40}),
        ::testing::Values(Bf16GemmPath::primitive, Bf16GemmPath::jit_gemm, Bf16GemmPath::mixed)),
    [](const auto& info) {
      const Shape& s = std::get<0>(info.param);
      return str("N", s.N, "_C", s.C, "_OC", s.OC, "_", path_name(std::get<1>(info.param)));
    });

// Empty reductions: no input features (the forward is its bias, the input gradient zeros
// when overwriting) and no tokens (the weight gradient keeps what it held).
TEST(Bf16Matmul, EmptyProductsOnBothRoutines) {
  for (const Bf16GemmPath path :
       {Bf16GemmPath::primitive, Bf16GemmPath::jit_gemm, Bf16GemmPath::mixed}) {
    if (!matmul_bf16_path_available(path)) continue;
    SCOPED_TRACE(path_name(path));
    const ScopedBf16GemmPath use(path);
    const int N = 3, OC = 5;
    const Buf bias = random_normal(OC, 1);
    Buf out(size_t(N) * OC, 7.0f);
    const std::vector<bf16> none(1);
    matmul_bf16_forward(out.data(), none.data(), none.data(), bias.data(), N, 0, OC);
    for (int r = 0; r < N; ++r)
      for (int o = 0; o < OC; ++o) EXPECT_EQ(out[size_t(r) * OC + o], bias[o]);
    Buf dw = random_normal(size_t(OC) * 4, 2), db = random_normal(OC, 3);
    const Buf dw0 = dw, db0 = db;
    matmul_bf16_backward_weight(dw.data(), db.data(), none.data(), none.data(), 0, 4, OC);
    EXPECT_EQ(dw, dw0);
    EXPECT_EQ(db, db0);
  }
  if (!matmul_bf16_path_available(Bf16GemmPath::jit_gemm))
    GTEST_SKIP() << "jit_gemm not available: the primitive path alone was checked";
}

TEST(Bf16Matmul, SameResultWithOneAndTwoThreads) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << kNoBf16Gemm;
  // Determinism across team sizes is not promised by oneDNN; what is promised here is that
  // a primitive built for one team size is not reused for another (the cache key), and that
  // either routine gives the same bits for the same call.
  const int N = 64, C = 96, OC = 80;
  const std::vector<bf16> x = to_bf16_vec(random_normal(size_t(N) * C, 1)),
                          w = to_bf16_vec(random_normal(size_t(OC) * C, 2));
  Buf ref(size_t(N) * OC);
  ref::matmul_forward(ref.data(), rounded(random_normal(size_t(N) * C, 1)).data(),
                      rounded(random_normal(size_t(OC) * C, 2)).data(), nullptr, N, C, OC);
  for (const Bf16GemmPath path : {Bf16GemmPath::primitive, Bf16GemmPath::jit_gemm}) {
    if (!matmul_bf16_path_available(path)) continue;
    SCOPED_TRACE(path_name(path));
    const ScopedBf16GemmPath use(path);
    Buf one(size_t(N) * OC), two(one.size()), again(one.size());
    omp_set_num_threads(1);
    matmul_bf16_forward(one.data(), x.data(), w.data(), nullptr, N, C, OC);
    omp_set_num_threads(2);
    matmul_bf16_forward(two.data(), x.data(), w.data(), nullptr, N, C, OC);
    matmul_bf16_forward(again.data(), x.data(), w.data(), nullptr, N, C, OC);
    omp_set_num_threads(1);
    EXPECT_LT(normalised_error(one, ref), 1e-5);
    EXPECT_LT(normalised_error(two, ref), 1e-5);
    EXPECT_TRUE(std::equal(two.begin(), two.end(), again.begin()));
  }
  if (!matmul_bf16_path_available(Bf16GemmPath::jit_gemm))
    GTEST_SKIP() << "jit_gemm not available: the primitive path alone was checked";
}

// A window growing one row at a time (the sampler) used to build one oneDNN primitive per
// row count. Now a row count runs as 64-row multiples plus power-of-two pieces, so 1..300
// rows need a few dozen primitives. A row's bits depend on the kernel oneDNN runs its piece
// on (docs/precision.md, "Row pieces and bits"):
//  - with AVX512-BF16 and without AMX every piece runs the brgemm kernel on AVX512-BF16 dot
//    products (brg:avx512_core_bf16), summing K in one order, so a row is the same bits
//    whichever piece it ran in: checked against 1-row calls;
//  - with AMX, oneDNN 2.6 sends small pieces (M <= 32 and M x N <= 256: here 1-3 rows) to
//    that kernel and the others to its tile kernel, whose additions round elsewhere, and
//    the tile kernel sums K in chunks sized to the rows it blocks together, so at K = 2048
//    its pieces differ among themselves too (256 rows against 4-192). The bits are still
//    the same for the same row count every time (SameResultWithOneAndTwoThreads), and
//    within (K + 1) e S of the exact product of the bf16 inputs: checked for every kernel;
//  - with AVX-512 and without AVX512-BF16 the primitive is oneDNN's gemm routine (gemm:jit),
//    whose 1-row calls take a gemv kernel: other bits, the same bound.
// The primitive path's property: the jit_gemm path keeps no primitives, and a 1-row call
// takes its gemv kernel (other bits, same bounds). On one thread: the property is the
// kernel's, not the team's (SameResultWithOneAndTwoThreads covers teams), and a team of two
// on a loaded machine waits at the barrier of each of these ~1500 GEMMs (12 s, not 0.6).
TEST(Bf16Matmul, GrowingRowCountsShareFewPrimitivesAndTheirKernelsBits) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << kNoBf16Gemm;
  struct OneThread {
    int saved = omp_get_max_threads();
    OneThread() { omp_set_num_threads(1); }
    ~OneThread() { omp_set_num_threads(saved); }
  } one_thread;
  const ScopedBf16GemmPath use(Bf16GemmPath::primitive);
  const int C = 2048, OC = 80, kMaxRows = 300;
  const Buf xf = random_normal(size_t(kMaxRows) * C, 3), wf = random_normal(size_t(OC) * C, 4);
  const std::vector<bf16> x = to_bf16_vec(xf), w = to_bf16_vec(wf);
  const Buf bias = random_normal(OC, 5);
  Buf exact(size_t(kMaxRows) * OC);
  ref::matmul_forward(exact.data(), rounded(xf).data(), rounded(wf).data(), bias.data(), kMaxRows,
                      C, OC);
  std::vector<double> scale = abs_products(
      kMaxRows, OC, C, [&](int m, int k) { return bf16_to_float(x[size_t(m) * C + k]); },
      [&](int k, int n) { return bf16_to_float(w[size_t(n) * C + k]); });
  for (size_t i = 0; i < scale.size(); ++i) scale[i] += std::fabs(bias[i % OC]);
  Buf by_row(size_t(kMaxRows) * OC);
  for (int r = 0; r < kMaxRows; ++r)
    matmul_bf16_forward(by_row.data() + size_t(r) * OC, x.data() + size_t(r) * C, w.data(),
                        bias.data(), 1, C, OC);
  const bool one_kernel = matmul_bf16_isa() == "brg:avx512_core_bf16";
  const size_t before = matmul_bf16_cached_primitives();
  for (int rows = 1; rows <= kMaxRows; ++rows) {
    const size_t n = size_t(rows) * OC;
    Buf out(n);
    matmul_bf16_forward(out.data(), x.data(), w.data(), bias.data(), rows, C, OC);
    if (one_kernel) {
      ASSERT_TRUE(std::equal(out.begin(), out.end(), by_row.begin())) << rows << " rows";
    }
    const std::vector<double> s(scale.begin(), scale.begin() + n);
    if (check_bound("rows vs exact", out, Buf(exact.begin(), exact.begin() + n), s, (C + 1) * kE) >
        1)
      FAIL() << rows << " rows";
  }
  // Exact: 2..16 rows (15, the 1-row shape was built above) and 64, 128, 192, 256 rows; the
  // pieces of 32 rows (and 16 and below, already there). K = 2048: the K blocking too.
  EXPECT_LE(matmul_bf16_cached_primitives() - before, 20u);
}

TEST(Bf16Transpose, MovesEveryElementToItsMirroredPlace) {
  // Sizes with and without full 16 x 16 register blocks and both kinds of edge.
  for (auto [rows, cols] : {std::pair{1, 1}, {16, 16}, {37, 50}, {1, 40}, {33, 17}, {64, 48}}) {
    std::vector<bf16> src(size_t(rows) * cols), dst(src.size());
    for (size_t i = 0; i < src.size(); ++i) src[i] = bf16(i * 2654435761u >> 16);
    bf16_transpose(dst.data(), src.data(), rows, cols);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j)
        ASSERT_EQ(dst[size_t(j) * rows + i], src[size_t(i) * cols + j])
            << rows << "x" << cols << " at " << i << "," << j;
  }
}

// ---- attention core ------------------------------------------------------------------------
//
// attention_{forward,backward}_bf16 against the fp32 kernels on the same unrounded inputs.
// The bound per element is the matmul bound above carried through the softmax (first order
// in u and e; the products of two error terms are ~u^2 of the result and are covered by the
// (1 + u)^2 factors), with hd the head dim, p the probabilities and sums over the causal
// range:
//   scores: |dS_ij| <= eS_ij = (2u + u^2 + 2 (hd + 1) e) scale sum_d |q_id k_jd|
//   softmax: moving every score of row i by <= m_i = max_j eS_ij moves p_ij by a factor in
//     [e^-2m_i, e^2m_i] (numerator and normaliser), so |dp_ij| <= d_i p_ij with
//     d_i = e^(2 m_i) - 1 + 2 sm, sm = (T + 16) e for each side's fp32 softmax;
//   out_id: sum_j p_ij |v_jd| ((1 + d_i)(1 + u)^2 - 1 + 2 (T + 1) e): p and v are rounded.
// Backward, both kernels given the same probabilities and output gradient g:
//   dP_ij = sum_d g_id v_jd: e1_ij = (2u + u^2 + 2 (hd + 1) e) sum_d |g_id v_jd|
//   D_i = sum_j p_ij dP_ij: eD_i = sum_j p_ij e1_ij + 2 (T + 1) e sum_j p_ij |dP_ij|
//   dS_ij = scale p_ij (dP_ij - D_i): eS_ij = scale p_ij (e1_ij + eD_i) + 4 e |dS_ij|
//   dq_id = sum_j dS_ij k_jd (rounded both): sum_j (eS_ij (1 + u)^2 + ((1 + u)^2 - 1 +
//     2 (T + 1) e) |dS_ij|) |k_jd|, and dk likewise with q; dv_jd = sum_i p_ij g_id:
//     ((1 + u)^2 - 1 + 2 (T + 1) e) sum_i p_ij |g_id|. The += onto the incoming gradient
//     adds 2 e of it.
// The test also asserts the bf16 result differs from fp32 by more than fp32 rounding could
// (the products really are bf16), and that unsupported head dims are the fp32 kernel exactly.

struct AttnShape {
  int B, T, C, NH;
};

class Bf16Attention : public ::testing::TestWithParam<AttnShape> {};

TEST_P(Bf16Attention, MatchesFp32TwinWithinThePropagatedBound) {
  const auto [B, T, C, NH] = GetParam();
  const int hd = C / NH;
  const double scale = 1.0 / std::sqrt(double(hd));
  const Buf qkv = random_normal(size_t(B) * T * 3 * C, 21),
            g = random_normal(size_t(B) * T * C, 22), dqkv_in = random_normal(qkv.size(), 23, 0.1f);
  Buf out16(size_t(B) * T * C), out32(out16.size());
  Buf att16(size_t(B) * NH * T * T), att32(att16.size());
  attention_forward_bf16(out16.data(), att16.data(), qkv.data(), B, T, C, NH);
  attention_forward(out32.data(), att32.data(), qkv.data(), B, T, C, NH);
  Buf scratch(attention_backward_scratch_floats(B, T, C, NH));
  Buf d16 = dqkv_in, d32 = dqkv_in;
  // Both backward calls read the fp32 forward's probabilities: the bound is the backward's own.
  attention_backward_bf16(d16.data(), scratch.data(), g.data(), qkv.data(), att32.data(), B, T, C,
                          NH);
  attention_backward(d32.data(), scratch.data(), g.data(), qkv.data(), att32.data(), B, T, C, NH);
  {  // Overwriting: whatever dqkv held is gone, equal to accumulating onto zeros.
    Buf over(qkv.size(), std::numeric_limits<float>::quiet_NaN()), zero_acc(qkv.size(), 0.0f);
    attention_backward_bf16(over.data(), scratch.data(), g.data(), qkv.data(), att32.data(), B, T,
                            C, NH, /*accumulate=*/false);
    attention_backward_bf16(zero_acc.data(), scratch.data(), g.data(), qkv.data(), att32.data(), B,
                            T, C, NH);
    EXPECT_EQ(normalised_error(over, zero_acc), 0.0);
  }
  {  // The bf16-output forms: bitwise to_bf16 of the fp32-output ones, on every path
     // (direct, T > 128, fp32 fallback).
    std::vector<bf16> o16(out16.size()), want_o(out16.size()), d16b(qkv.size()), want_d(qkv.size());
    Buf stage(qkv.size(), std::numeric_limits<float>::quiet_NaN()), att_b(att16.size());
    attention_forward_bf16_out16(o16.data(), stage.data(), att_b.data(), qkv.data(), B, T, C, NH);
    to_bf16(want_o.data(), out16.data(), out16.size());
    EXPECT_EQ(o16, want_o);
    EXPECT_EQ(normalised_error(att_b, att16), 0.0);
    Buf over(qkv.size());
    attention_backward_bf16(over.data(), scratch.data(), g.data(), qkv.data(), att32.data(), B, T,
                            C, NH, /*accumulate=*/false);
    to_bf16(want_d.data(), over.data(), over.size());
    attention_backward_bf16_out16(d16b.data(), stage.data(), scratch.data(), g.data(), qkv.data(),
                                  att32.data(), B, T, C, NH);
    EXPECT_EQ(d16b, want_d);
  }
  if (!attention_bf16_supported(C, NH)) {  // fp32 kernels, bit for bit
    EXPECT_EQ(normalised_error(out16, out32), 0.0);
    EXPECT_EQ(normalised_error(att16, att32), 0.0);
    EXPECT_EQ(normalised_error(d16, d32), 0.0);
    return;
  }
  const double ka = 2 * kU + kU * kU + 2 * (hd + 1) * kE, r2 = (1 + kU) * (1 + kU) - 1;
  const double acc = 2 * (T + 1) * kE, sm = (T + 16) * kE;
  std::vector<double> out_b(out16.size(), 0.0), d_b(d16.size(), 0.0);
  for (size_t i = 0; i < d_b.size(); ++i) d_b[i] = 2 * kE * std::fabs(dqkv_in[i]);
  auto at = [&](const Buf& x, int b, int t, int col) {
    return double(x[(size_t(b) * T + t) * 3 * C + col]);
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const int qo = h * hd, ko = C + h * hd, vo = 2 * C + h * hd;
      const float* p = att32.data() + (size_t(b) * NH + h) * T * T;
      for (int i = 0; i < T; ++i) {
        std::vector<double> e1(i + 1), dP(i + 1), dS(i + 1), eS(i + 1);
        double m = 0;
        for (int j = 0; j <= i; ++j) {
          double aqk = 0, agv = 0, gv = 0;
          for (int d = 0; d < hd; ++d) {
            aqk += std::fabs(at(qkv, b, i, qo + d) * at(qkv, b, j, ko + d));
            const double gd = g[(size_t(b) * T + i) * C + h * hd + d];
            gv += gd * at(qkv, b, j, vo + d);
            agv += std::fabs(gd * at(qkv, b, j, vo + d));
          }
          m = std::max(m, ka * scale * aqk);
          dP[j] = gv, e1[j] = ka * agv;
        }
        const double di = std::exp(2 * m) - 1 + 2 * sm;
        double D = 0, eD = 0, aD = 0;
        for (int j = 0; j <= i; ++j) {
          D += p[size_t(i) * T + j] * dP[j];
          eD += p[size_t(i) * T + j] * e1[j];
          aD += p[size_t(i) * T + j] * std::fabs(dP[j]);
        }
        eD += acc * aD;
        for (int j = 0; j <= i; ++j) {
          const double pij = p[size_t(i) * T + j];
          dS[j] = scale * pij * (dP[j] - D);
          eS[j] = scale * pij * (e1[j] + eD) + 4 * kE * std::fabs(dS[j]);
        }
        for (int d = 0; d < hd; ++d) {
          double fo = 0, fq = 0;
          for (int j = 0; j <= i; ++j) {
            const double pij = p[size_t(i) * T + j];
            fo += pij * std::fabs(at(qkv, b, j, vo + d));
            const double cs = eS[j] * (1 + kU) * (1 + kU) + (r2 + acc) * std::fabs(dS[j]);
            fq += cs * std::fabs(at(qkv, b, j, ko + d));
            // Query row i's share of key row j's gradients.
            d_b[(size_t(b) * T + j) * 3 * C + ko + d] += cs * std::fabs(at(qkv, b, i, qo + d));
            d_b[(size_t(b) * T + j) * 3 * C + vo + d] +=
                (r2 + acc) * pij * std::fabs(double(g[(size_t(b) * T + i) * C + h * hd + d]));
          }
          out_b[(size_t(b) * T + i) * C + h * hd + d] =
              fo * ((1 + di) * (1 + kU) * (1 + kU) - 1 + acc);
          d_b[(size_t(b) * T + i) * 3 * C + qo + d] += fq;
        }
      }
    }
  const double wf = check_bound("forward vs fp32", out16, out32, out_b, 1.0);
  const double wb = check_bound("backward vs fp32", d16, d32, d_b, 1.0);
  RecordProperty("worst_ratio_forward", std::to_string(wf));
  RecordProperty("worst_ratio_backward", std::to_string(wb));
  // Not fp32 in disguise: fp32 rounding alone stays near 1e-6 of the values.
  EXPECT_GT(normalised_error(out16, out32), 2e-4);
  EXPECT_GT(normalised_error(d16, d32), 2e-4);
  // The probabilities are fp32 softmax of slightly different scores: close, zero above the
  // diagonal exactly.
  for (int bh = 0; bh < B * NH; ++bh)
    for (int i = 0; i < T; ++i)
      for (int j = i + 1; j < T; ++j) ASSERT_EQ(att16[(size_t(bh) * T + i) * T + j], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16Attention,
                         ::testing::Values(AttnShape{1, 1, 32, 1}, AttnShape{2, 37, 64, 2},
                                           AttnShape{1, 70, 64, 1}, AttnShape{2, 128, 256, 4},
                                           AttnShape{1, 45, 256, 2}, AttnShape{1, 133, 128, 1},
                                           AttnShape{1, 33, 32, 2}, AttnShape{1, 19, 96, 2}),
                         [](const auto& info) {
                           const AttnShape& s = info.param;
                           return str("B", s.B, "_T", s.T, "_C", s.C, "_NH", s.NH);
                         });

TEST(Bf16Attention, SameResultWithOneAndTwoThreads) {
  // Heads are independent and each runs on one thread: the team size cannot change a bit.
  const int B = 2, T = 40, C = 128, NH = 2;
  const Buf qkv = random_normal(size_t(B) * T * 3 * C, 31),
            g = random_normal(size_t(B) * T * C, 32);
  Buf o1(size_t(B) * T * C), o2(o1.size()), a1(size_t(B) * NH * T * T), a2(a1.size());
  Buf d1(qkv.size(), 0.0f), d2(qkv.size(), 0.0f), scratch(a1.size());
  omp_set_num_threads(1);
  attention_forward_bf16(o1.data(), a1.data(), qkv.data(), B, T, C, NH);
  attention_backward_bf16(d1.data(), scratch.data(), g.data(), qkv.data(), a1.data(), B, T, C, NH);
  omp_set_num_threads(2);
  attention_forward_bf16(o2.data(), a2.data(), qkv.data(), B, T, C, NH);
  attention_backward_bf16(d2.data(), scratch.data(), g.data(), qkv.data(), a2.data(), B, T, C, NH);
  omp_set_num_threads(1);
  EXPECT_EQ(normalised_error(o1, o2), 0.0);
  EXPECT_EQ(normalised_error(a1, a2), 0.0);
  EXPECT_EQ(normalised_error(d1, d2), 0.0);
}

TEST(Bf16Gelu, FusedKernelsEqualGeluThenRounding) {
  // Bitwise: the block's bf16 path may use either form and stay what it was. Rows with
  // and without a 16-wide tail; values from denormal-sized to large, and a NaN.
  for (auto [N, OC] : {std::pair{3, 37}, {4, 64}, {1, 5}}) {
    const size_t n = size_t(N) * OC;
    Buf pre = random_normal(n, 41, 3.0f), bias = random_normal(OC, 42), dout = random_normal(n, 43);
    pre[0] = 1e-39f, pre[1] = -30.0f, pre[2] = 80.0f, dout[1] = 1e-38f;
    if (n > 4) pre[4] = std::numeric_limits<float>::quiet_NaN();
    Buf pre32 = pre, pre16 = pre, out32(n), d32(n);
    bias_gelu_forward(out32.data(), pre32.data(), bias.data(), N, OC);
    std::vector<bf16> out16(n), want(n);
    bias_gelu_forward_bf16(out16.data(), pre16.data(), bias.data(), N, OC);
    to_bf16(want.data(), out32.data(), n);
    EXPECT_EQ(out16, want) << N << "x" << OC;
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(pre16[i]), std::bit_cast<uint32_t>(pre32[i]));
    Buf d = dout;
    gelu_backward(d.data(), pre32.data(), d.data(), n);
    std::vector<bf16> d16(n);
    gelu_backward_bf16(d16.data(), pre32.data(), dout.data(), n);
    to_bf16(want.data(), d.data(), n);
    EXPECT_EQ(d16, want) << N << "x" << OC;
    // The pass for a GEMM that added the bias itself: only pre read, the same act bits.
    std::vector<bf16> act(n);
    gelu_forward_bf16(act.data(), pre32.data(), n);
    to_bf16(want.data(), out32.data(), n);
    EXPECT_EQ(act, want) << N << "x" << OC;
  }
  // Past one of its blocks (4096 values) with a tail, on two threads: the blocks' seams.
  const size_t n = 3 * 4096 + 21;
  const Buf pre = random_normal(n, 44, 3.0f);
  Buf g(n);
  gelu_forward(g.data(), pre.data(), n);
  std::vector<bf16> act(n, bf16(0x7fff)), want(n);
  to_bf16(want.data(), g.data(), n);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  gelu_forward_bf16(act.data(), pre.data(), n);
  omp_set_num_threads(saved);
  EXPECT_EQ(act, want);
}

TEST(Bf16LayerNorm, FusedForwardEqualsLayerNormThenRounding) {
  // Bitwise, statistics included; row widths with and without a vector tail, rows with a
  // large mean and one with a NaN.
  for (auto [N, C] : {std::pair{5, 37}, {3, 512}, {2, 1}}) {
    const size_t n = size_t(N) * C;
    Buf x = random_normal(n, 51, 2.0f), w = random_normal(C, 52), b = random_normal(C, 53);
    for (int c = 0; c < C; ++c) x[c] += 1000.0f;
    if (N > 2) x[size_t(2) * C] = std::numeric_limits<float>::quiet_NaN();
    Buf y(n), m32(N), r32(N), m16(N), r16(N);
    layernorm_forward(y.data(), m32.data(), r32.data(), x.data(), w.data(), b.data(), N, C);
    std::vector<bf16> got(n), want(n);
    layernorm_forward_bf16(got.data(), m16.data(), r16.data(), x.data(), w.data(), b.data(), N, C);
    to_bf16(want.data(), y.data(), n);
    EXPECT_EQ(got, want) << N << "x" << C;
    for (int i = 0; i < N; ++i) {
      EXPECT_EQ(std::bit_cast<uint32_t>(m16[i]), std::bit_cast<uint32_t>(m32[i]));
      EXPECT_EQ(std::bit_cast<uint32_t>(r16[i]), std::bit_cast<uint32_t>(r32[i]));
    }
  }
}

TEST(Bf16Matmul, NamesTheIsaOneDnnPicked) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << kNoBf16Gemm;
  // The name follows the routine: the primitive's is oneDNN's implementation name,
  // "brg:avx512_core_bf16" or "brg:avx512_core_amx_bf16" (with AMX), or "gemm:jit" where the
  // CPU has AVX-512 but not AVX512-BF16; the JIT routine's is "gemm:jit:" and the ISA.
  const ScopedBf16GemmPath use(Bf16GemmPath::primitive);
  const std::string isa = matmul_bf16_isa();
  EXPECT_TRUE(isa.rfind("brg:avx512", 0) == 0 || isa == "gemm:jit") << isa;
  if (matmul_bf16_path_available(Bf16GemmPath::jit_gemm)) {
    const ScopedBf16GemmPath jit(Bf16GemmPath::jit_gemm);
    EXPECT_EQ(matmul_bf16_isa().rfind("gemm:jit:avx512", 0), 0u) << matmul_bf16_isa();
  }
}

}  // namespace
}  // namespace mt::test
