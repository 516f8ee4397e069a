// The grouped GEMMs (kernels/grouped_gemm.h) against their naive twins
// (kernels/reference/grouped_gemm_ref.h) on every path this CPU runs, the portable one
// always: uneven and empty groups, K and N that are not multiples of any tile or chunk, the
// += of the gradients and the overwrite of backward_input(accumulate = false).
//
// Bound, per element (e = 2^-24): |fast - ref| <= (K + 2) e S, S = the same sum over the
// absolute values (the += start included). Products of bf16 values are exact in fp32 and
// fp32 products are rounded once (at most), so what is left is fp32 accumulation of K + 1
// terms: the standard gamma bound, worst case for any data. bf16 operands are the fp32 data
// rounded to bf16, so the reference sees exactly the kernel's inputs.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kernels/bf16.h"
#include "kernels/grouped_gemm.h"
#include "kernels/kernel_harness.h"
#include "kernels/reference/grouped_gemm_ref.h"

namespace mt::test {
namespace {

struct Shape {
  std::string name;
  int C, OC;
  std::vector<int32_t> rows;  // per group, zeros included
};

// Odd K in every product and N short of every tile; the second shape's K runs over several
// chunks of both micro-kernels (fp32 256, bf16 512) in every product but backward_input.
const Shape kShapes[] = {{"uneven", 41, 24, {0, 1, 13, 0, 37, 64, 5, 0}},
                         {"chunks", 520, 18, {530, 0, 17, 3}}};

// One problem's operands in fp32 (rounded to bf16 values when bf16), and as bf16.
struct Data {
  Shape s;
  bool bf16;
  int G, R;
  std::vector<int32_t> offset;
  Buf inp, dout, weight;  // (R, C), (R, OC), G x (OC, C)
  std::vector<mt::bf16> inp16, dout16, weight16;

  Data(const Shape& shape, bool half, unsigned seed) : s(shape), bf16(half), G(int(s.rows.size())) {
    offset.assign(1, 0);
    for (const int32_t r : s.rows) offset.push_back(offset.back() + r);
    R = offset.back();
    inp = random_normal(size_t(R) * s.C, seed);
    dout = random_normal(size_t(R) * s.OC, seed + 1);
    weight = random_normal(size_t(G) * s.OC * s.C, seed + 2, 0.1f);
    for (Buf* b : {&inp, &dout, &weight}) {
      if (bf16) round_to_bf16(b->data(), b->size());
    }
    inp16 = narrow(inp), dout16 = narrow(dout), weight16 = narrow(weight);
  }
  static std::vector<mt::bf16> narrow(const Buf& b) {
    std::vector<mt::bf16> out(b.size());
    to_bf16(out.data(), b.data(), b.size());
    return out;
  }
  template <typename T>
  static std::vector<T*> per_group(T* base, int G, size_t each) {
    std::vector<T*> out;
    for (int g = 0; g < G; ++g) out.push_back(base + g * each);
    return out;
  }
  size_t wsize() const { return size_t(s.OC) * s.C; }
  std::vector<const float*> w() const { return per_group<const float>(weight.data(), G, wsize()); }
  std::vector<const mt::bf16*> w16() const {
    return per_group<const mt::bf16>(weight16.data(), G, wsize());
  }
};

Buf absolute(const Buf& b) {
  Buf out(b.size());
  for (size_t i = 0; i < b.size(); ++i) out[i] = std::fabs(b[i]);
  return out;
}

// fast within (K + 2) e S of want, S = bound (see the header).
void expect_within(const Buf& fast, const Buf& want, const Buf& bound, int K, const char* what) {
  ASSERT_EQ(fast.size(), want.size());
  const double e = std::ldexp(1.0, -24);
  int bad = 0;
  for (size_t i = 0; i < fast.size() && bad < 5; ++i) {
    const double tol = (K + 2) * e * bound[i] + 1e-30;
    if (!(std::fabs(double(fast[i]) - want[i]) <= tol))
      ADD_FAILURE() << what << "[" << i << "]: " << fast[i] << " vs " << want[i] << " (tol " << tol
                    << ")",
          ++bad;
  }
}

using Param = std::tuple<bool, GroupedGemmPath>;  // bf16, path

class GroupedGemm : public ::testing::TestWithParam<Param> {
 protected:
  bool bf16() const { return std::get<0>(GetParam()); }
  ScopedGroupedGemmPath path_{std::get<0>(GetParam()), std::get<1>(GetParam())};
};

void fast_forward(const Data& d, float* out) {
  if (d.bf16)
    return grouped_matmul_bf16_forward(out, d.inp16.data(), d.w16().data(), d.offset.data(), d.G,
                                       d.s.C, d.s.OC);
  grouped_matmul_forward(out, d.inp.data(), d.w().data(), d.offset.data(), d.G, d.s.C, d.s.OC);
}

void fast_backward_input(const Data& d, float* dinp, bool accumulate) {
  if (d.bf16)
    return grouped_matmul_bf16_backward_input(dinp, d.dout16.data(), d.w16().data(),
                                              d.offset.data(), d.G, d.s.C, d.s.OC, accumulate);
  grouped_matmul_backward_input(dinp, d.dout.data(), d.w().data(), d.offset.data(), d.G, d.s.C,
                                d.s.OC, accumulate);
}

void fast_backward_weight(const Data& d, Buf& dweight) {
  const std::vector<float*> dw = Data::per_group(dweight.data(), d.G, d.wsize());
  if (d.bf16)
    return grouped_matmul_bf16_backward_weight(dw.data(), d.dout16.data(), d.inp16.data(),
                                               d.offset.data(), d.G, d.s.C, d.s.OC);
  grouped_matmul_backward_weight(dw.data(), d.dout.data(), d.inp.data(), d.offset.data(), d.G,
                                 d.s.C, d.s.OC);
}

TEST_P(GroupedGemm, ForwardMatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name);
    const Data d(s, bf16(), 11);
    Buf fast(size_t(d.R) * s.OC, std::numeric_limits<float>::quiet_NaN()), want(fast.size());
    Buf bound(fast.size());
    fast_forward(d, fast.data());
    ref::grouped_matmul_forward(want.data(), d.inp.data(), d.w().data(), d.offset.data(), d.G, s.C,
                                s.OC);
    const Buf ai = absolute(d.inp), aw = absolute(d.weight);
    ref::grouped_matmul_forward(bound.data(), ai.data(),
                                Data::per_group<const float>(aw.data(), d.G, d.wsize()).data(),
                                d.offset.data(), d.G, s.C, s.OC);
    expect_within(fast, want, bound, s.C, "out");
  }
}

// accumulate: dinp += from a random start; else dinp = over a NaN start (nothing read).
TEST_P(GroupedGemm, BackwardInputAccumulatesOrOverwrites) {
  for (const Shape& s : kShapes)
    for (const bool accumulate : {true, false}) {
      SCOPED_TRACE(s.name + (accumulate ? " +=" : " ="));
      const Data d(s, bf16(), 23);
      const Buf start = accumulate
                            ? random_normal(size_t(d.R) * s.C, 5)
                            : Buf(size_t(d.R) * s.C, std::numeric_limits<float>::quiet_NaN());
      Buf fast = start, want = accumulate ? start : Buf(start.size(), 0.0f);
      Buf bound = absolute(want);
      fast_backward_input(d, fast.data(), accumulate);
      ref::grouped_matmul_backward_input(want.data(), d.dout.data(), d.w().data(), d.offset.data(),
                                         d.G, s.C, s.OC, true);
      const Buf ad = absolute(d.dout), aw = absolute(d.weight);
      ref::grouped_matmul_backward_input(
          bound.data(), ad.data(), Data::per_group<const float>(aw.data(), d.G, d.wsize()).data(),
          d.offset.data(), d.G, s.C, s.OC, true);
      expect_within(fast, want, bound, s.OC, "dinp");
    }
}

// dweight += for groups with rows; an empty group's gradient keeps its bits.
TEST_P(GroupedGemm, BackwardWeightAccumulatesAndSkipsEmptyGroups) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name);
    const Data d(s, bf16(), 37);
    const Buf start = random_normal(d.G * d.wsize(), 7);
    Buf fast = start, want = start, bound = absolute(start);
    fast_backward_weight(d, fast);
    ref::grouped_matmul_backward_weight(Data::per_group(want.data(), d.G, d.wsize()).data(),
                                        d.dout.data(), d.inp.data(), d.offset.data(), d.G, s.C,
                                        s.OC);
    const Buf ad = absolute(d.dout), ai = absolute(d.inp);
    ref::grouped_matmul_backward_weight(Data::per_group(bound.data(), d.G, d.wsize()).data(),
                                        ad.data(), ai.data(), d.offset.data(), d.G, s.C, s.OC);
    int K = 0;
    for (const int32_t r : s.rows) K = std::max(K, r);
    expect_within(fast, want, bound, K, "dweight");
    for (int g = 0; g < d.G; ++g) {
      if (s.rows[g] != 0) continue;
      for (size_t i = g * d.wsize(); i < (g + 1) * d.wsize(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(fast[i]), std::bit_cast<uint32_t>(start[i]))
            << "group " << g << " has no rows";
      }
    }
  }
}

// A second call on the same buffers with new contents computes from the new contents
// (a kernel may keep a group's transposed operand between the items of one call, never
// between calls). One thread, so that both calls run on the same thread's scratch.
TEST_P(GroupedGemm, NextCallReadsNewDataInTheSameBuffers) {
  Data d({"one group", 24, 20, {40}}, bf16(), 53);
  Buf first(d.wsize(), 0.0f), fast(d.wsize(), 0.0f), want(d.wsize(), 0.0f), bound(d.wsize());
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  fast_backward_weight(d, first);
  d.dout = random_normal(d.dout.size(), 59);
  if (d.bf16) round_to_bf16(d.dout.data(), d.dout.size());
  to_bf16(d.dout16.data(), d.dout.data(), d.dout.size());  // same buffers, new values
  fast_backward_weight(d, fast);
  omp_set_num_threads(threads);
  float* w = want.data();
  float* b = bound.data();
  ref::grouped_matmul_backward_weight(&w, d.dout.data(), d.inp.data(), d.offset.data(), 1, 24, 20);
  const Buf ad = absolute(d.dout), ai = absolute(d.inp);
  ref::grouped_matmul_backward_weight(&b, ad.data(), ai.data(), d.offset.data(), 1, 24, 20);
  expect_within(fast, want, bound, 40, "dweight");
}

// The paths of this CPU, the portable one always; own_kernels: without the oneDNN loop.
std::vector<Param> paths(bool own_kernels) {
  std::vector<Param> out;
  for (const bool half : {false, true})
    for (const GroupedGemmPath p :
         {GroupedGemmPath::portable, GroupedGemmPath::loop, GroupedGemmPath::avx512,
          GroupedGemmPath::avx512_bf16, GroupedGemmPath::amx})
      if (grouped_gemm_path_available(half, p) && !(own_kernels && p == GroupedGemmPath::loop))
        out.emplace_back(half, p);
  return out;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  ScopedGroupedGemmPath path(std::get<0>(info.param), std::get<1>(info.param));
  std::string name = std::string(std::get<0>(info.param) ? "bf16_" : "fp32_") +
                     grouped_gemm_isa(std::get<0>(info.param));
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Paths, GroupedGemm, ::testing::ValuesIn(paths(false)), param_name);

// On the paths of our own kernels a row's output depends on nothing but that row and its
// weight: not on the thread count, nor on the other rows of its group.
class GroupedGemmBits : public GroupedGemm {};

TEST_P(GroupedGemmBits, RowsDoNotDependOnThreadsOrNeighbours) {
  const Data d(kShapes[0], bf16(), 41);
  const size_t n = size_t(d.R) * d.s.OC;
  Buf one(n), two(n);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  fast_forward(d, one.data());
  omp_set_num_threads(2);
  fast_forward(d, two.data());
  omp_set_num_threads(threads);
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), n * sizeof(float)));
  // Group 5 (64 rows) alone, cut into groups of 1, 30 and 33 rows with the same weight.
  Data part = d;
  const int32_t r0 = d.offset[5];
  part.offset = {r0, r0 + 1, r0 + 31, r0 + 64};
  part.G = 3;
  for (int g = 0; g < 3; ++g) {
    std::copy_n(d.weight.begin() + 5 * d.wsize(), d.wsize(), part.weight.begin() + g * d.wsize());
    std::copy_n(d.weight16.begin() + 5 * d.wsize(), d.wsize(),
                part.weight16.begin() + g * d.wsize());
  }
  Buf cut(n, 0.0f);
  fast_forward(part, cut.data());
  for (size_t i = size_t(r0) * d.s.OC; i < size_t(r0 + 64) * d.s.OC; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(cut[i]), std::bit_cast<uint32_t>(one[i])) << i;
}

INSTANTIATE_TEST_SUITE_P(Paths, GroupedGemmBits, ::testing::ValuesIn(paths(true)), param_name);

TEST(GroupedGemmPaths, DefaultIsTheFastestMeasuredAndOverridesAreScoped) {
  using P = GroupedGemmPath;
  EXPECT_TRUE(grouped_gemm_path_available(false, grouped_gemm_default_path(false)));
  EXPECT_TRUE(grouped_gemm_path_available(true, grouped_gemm_default_path(true)));
  // fp32 takes oneDNN's sgemm per group, measured faster than the avx512 kernel.
  EXPECT_EQ(grouped_gemm_default_path(false), P::loop);
  const P fastest = grouped_gemm_path_available(true, P::amx)           ? P::amx
                    : grouped_gemm_path_available(true, P::avx512_bf16) ? P::avx512_bf16
                                                                        : P::loop;
  if (grouped_gemm_path_available(true, fastest)) {
    EXPECT_EQ(grouped_gemm_default_path(true), fastest);
  }
  const std::string before = grouped_gemm_isa(true);
  {
    ScopedGroupedGemmPath portable(true, P::portable);
    EXPECT_EQ(grouped_gemm_isa(true), "portable");
    EXPECT_EQ(grouped_gemm_path(false), grouped_gemm_default_path(false));  // fp32 untouched
  }
  EXPECT_EQ(grouped_gemm_isa(true), before);
  // Paths of the other precision are never available.
  EXPECT_THROW(ScopedGroupedGemmPath(false, P::amx), RuntimeError);
  EXPECT_THROW(ScopedGroupedGemmPath(false, P::avx512_bf16), RuntimeError);
  EXPECT_THROW(ScopedGroupedGemmPath(true, P::avx512), RuntimeError);
}

}  // namespace
}  // namespace mt::test
