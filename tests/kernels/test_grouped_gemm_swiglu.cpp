// The bf16 grouped GEMMs with SwiGLU in their store (grouped_gemm.h, *_swiglu) against the
// unfused composition they replace (the GEMM, then swiglu.h's bf16 function over its
// rows), bit for bit: with and without packed weights, one thread (a group's columns in one
// item) and three (groups split into column blocks), groups of no rows and rows short of a
// tile, K short of a tile step (A copied to a padded stage), and a block of rows that does
// not start at row 0 (a part of --moe-overlap-parts).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/bf16.h"
#include "kernels/grouped_gemm.h"
#include "kernels/swiglu.h"

namespace mt {
namespace {

struct Shape {
  int K, H;  // the GEMM's reduction (forward: C; backward_input: OC) and hidden units
};

std::vector<bf16> random16(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(normal01(23, stream, i));
  std::vector<bf16> out(n);
  to_bf16(out.data(), v.data(), n);
  return out;
}

// Rows [offset[0], offset[G]) of a block of 200 rows: the first 20 belong to another part.
const std::vector<int32_t> kOffset = {20, 65, 65, 72, 200};
constexpr size_t kRows = 200;
constexpr int kGroups = 4;

// Weights (rows, cols) per group, their pointers and (packed) their packs for `which`.
struct Weights {
  std::vector<bf16> data;
  std::vector<const bf16*> ptr;
  std::vector<std::vector<uint32_t>> packs;
  std::vector<const uint32_t*> pack_ptr;
  Weights(int in, int out, GroupedPack which, uint64_t seed)
      : data(random16(size_t(kGroups) * in * out, seed)) {
    for (int g = 0; g < kGroups; ++g) {
      ptr.push_back(data.data() + size_t(g) * in * out);
      packs.emplace_back(grouped_bf16_packed_size(which, in, out));
      grouped_bf16_pack(packs.back().data(), which, ptr.back(), in, out);
      pack_ptr.push_back(packs.back().data());
    }
  }
  const uint32_t* const* packed(bool on) const { return on ? pack_ptr.data() : nullptr; }
};

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

class GroupedGemmSwiglu : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (!grouped_gemm_path_available(true, GroupedGemmPath::amx))
      GTEST_SKIP() << "no AMX on this CPU: elsewhere the calls are the composition";
    saved_threads_ = omp_get_max_threads();
  }
  void TearDown() override { omp_set_num_threads(saved_threads_); }
  // Each case at 1 and 3 threads, with and without packs.
  template <typename F>
  void each_way(F&& f) {
    for (int threads : {1, 3})
      for (bool packed : {true, false}) {
        SCOPED_TRACE(std::to_string(threads) + " threads, packed " + std::to_string(packed));
        omp_set_num_threads(threads);
        f(packed);
      }
  }
  ScopedGroupedGemmPath amx_{true, grouped_gemm_path_available(true, GroupedGemmPath::amx)
                                       ? GroupedGemmPath::amx
                                       : GroupedGemmPath::portable};
  int saved_threads_ = 1;
};

TEST_P(GroupedGemmSwiglu, ForwardIsTheGemmThenSwigluBitForBit) {
  const Shape s = GetParam();
  const int C = s.K, H = s.H, r0 = kOffset[0], M = kOffset.back() - r0;
  ASSERT_TRUE(grouped_bf16_fuses_swiglu(H));
  const Weights up(C, 2 * H, GroupedPack::forward, 2);
  const std::vector<bf16> x = random16(kRows * C, 1);
  each_way([&](bool packed) {
    std::vector<float> gu(kRows * 2 * H, -1.0f), want_gu = gu;
    std::vector<bf16> act(kRows * H, 7), want_act = act;
    grouped_matmul_bf16_forward(want_gu.data(), x.data(), up.ptr.data(), kOffset.data(), kGroups, C,
                                2 * H, up.packed(packed));
    swiglu_forward_bf16(want_act.data() + size_t(r0) * H, want_gu.data() + size_t(r0) * 2 * H, M,
                        H);
    grouped_matmul_bf16_forward_swiglu(gu.data(), act.data(), x.data(), up.ptr.data(),
                                       kOffset.data(), kGroups, C, H, up.packed(packed));
    EXPECT_TRUE(same_bits(gu, want_gu));
    EXPECT_TRUE(same_bits(act, want_act));
  });
}

TEST_P(GroupedGemmSwiglu, BackwardInputIsTheGemmThenSwigluBackwardBitForBit) {
  const Shape s = GetParam();
  const int OC = s.K, H = s.H, r0 = kOffset[0], M = kOffset.back() - r0;
  const Weights down(H, OC, GroupedPack::backward_input, 4);
  const std::vector<bf16> dy = random16(kRows * OC, 5);
  std::vector<float> gu(kRows * 2 * H);
  for (size_t i = 0; i < gu.size(); ++i) gu[i] = 2.0f * float(normal01(29, 6, i));
  each_way([&](bool packed) {
    std::vector<float> d_act(kRows * H);
    std::vector<bf16> dgu(kRows * 2 * H, 7), want = dgu;
    grouped_matmul_bf16_backward_input(d_act.data(), dy.data(), down.ptr.data(), kOffset.data(),
                                       kGroups, H, OC, false, down.packed(packed));
    swiglu_backward_bf16(want.data() + size_t(r0) * 2 * H, gu.data() + size_t(r0) * 2 * H,
                         d_act.data() + size_t(r0) * H, M, H);
    grouped_matmul_bf16_backward_input_swiglu(dgu.data(), gu.data(), dy.data(), down.ptr.data(),
                                              kOffset.data(), kGroups, H, OC, down.packed(packed));
    EXPECT_TRUE(same_bits(dgu, want));
  });
}

// K 512 and H 256 are the bench's experts; K 40 is short of a tile step, H 48 an odd
// number of column tiles, H 16 one.
INSTANTIATE_TEST_SUITE_P(Shapes, GroupedGemmSwiglu,
                         ::testing::Values(Shape{64, 16}, Shape{40, 48}, Shape{96, 64},
                                           Shape{512, 256}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           std::string name = "K";
                           name += std::to_string(i.param.K);
                           name += 'H';
                           name += std::to_string(i.param.H);
                           return name;
                         });

TEST(GroupedGemmSwigluFallback, UnitsNotInWholeTilesRunTheComposition) {
  EXPECT_FALSE(grouped_bf16_fuses_swiglu(24));
  EXPECT_FALSE(grouped_bf16_fuses_swiglu(0));
}

}  // namespace
}  // namespace mt
