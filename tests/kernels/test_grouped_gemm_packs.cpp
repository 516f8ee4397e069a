// The bf16 grouped GEMMs with weights packed once (grouped_gemm.h, GroupedPack): on the AMX
// and AVX512-BF16 paths (each this CPU has) a call given packs reads them instead of packing
// each item's columns itself, with the same bits, whatever the column blocks of the call (one
// thread: one block per group; three threads: groups split into blocks of columns) and at shapes
// short of whole tiles and panels (C, OC not multiples of 32 or 16).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <vector>

#include "core/rng.h"
#include "kernels/bf16.h"
#include "kernels/grouped_gemm.h"

namespace mt {
namespace {

struct Case {
  int C, OC;
};

struct Operands {
  int C, OC, G;
  std::vector<int32_t> offset;
  std::vector<bf16> inp, dout, weights;
  std::vector<std::vector<uint32_t>> packs[2];  // GroupedPack::forward, backward_input

  std::vector<bf16> random16(size_t n, uint64_t stream) const {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = float(normal01(11, stream, i));
    std::vector<bf16> out(n);
    to_bf16(out.data(), v.data(), n);
    return out;
  }
  Operands(const Case& c, uint64_t seed) : C(c.C), OC(c.OC), offset({0, 45, 45, 52, 181}) {
    G = int(offset.size()) - 1;
    const size_t rows = size_t(offset.back());
    inp = random16(rows * C, seed), dout = random16(rows * OC, seed + 1);
    weights = random16(size_t(G) * OC * C, seed + 2);
    for (GroupedPack which : {GroupedPack::forward, GroupedPack::backward_input})
      for (int g = 0; g < G; ++g) {
        std::vector<uint32_t>& p =
            packs[int(which)].emplace_back(grouped_bf16_packed_size(which, C, OC), 0xDEADBEEFu);
        grouped_bf16_pack(p.data(), which, weight(g), C, OC);
      }
  }
  const bf16* weight(int g) const { return weights.data() + size_t(g) * OC * C; }
  std::vector<const bf16*> weight_pointers() const {
    std::vector<const bf16*> w;
    for (int g = 0; g < G; ++g) w.push_back(weight(g));
    return w;
  }
  std::vector<const uint32_t*> pack_pointers(GroupedPack which) const {
    std::vector<const uint32_t*> p;
    for (const auto& v : packs[int(which)]) p.push_back(v.data());
    return p;
  }
};

// forward's and backward_input's outputs (accumulating onto ones), with or without packs.
std::vector<float> products(const Operands& o, const std::vector<const bf16*>& w,
                            const Operands* packs) {
  const size_t rows = size_t(o.offset.back());
  std::vector<float> out(rows * o.OC), dinp(rows * o.C, 1.0f);
  const std::vector<const uint32_t*> f =
      packs ? packs->pack_pointers(GroupedPack::forward) : std::vector<const uint32_t*>{};
  const std::vector<const uint32_t*> b =
      packs ? packs->pack_pointers(GroupedPack::backward_input) : std::vector<const uint32_t*>{};
  grouped_matmul_bf16_forward(out.data(), o.inp.data(), w.data(), o.offset.data(), o.G, o.C, o.OC,
                              packs ? f.data() : nullptr);
  grouped_matmul_bf16_backward_input(dinp.data(), o.dout.data(), w.data(), o.offset.data(), o.G,
                                     o.C, o.OC, /*accumulate=*/true, packs ? b.data() : nullptr);
  out.insert(out.end(), dinp.begin(), dinp.end());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The paths that read packs, those this CPU has.
std::vector<GroupedGemmPath> packing_paths() {
  std::vector<GroupedGemmPath> paths;
  for (const GroupedGemmPath p : {GroupedGemmPath::amx, GroupedGemmPath::avx512_bf16})
    if (grouped_gemm_path_available(true, p)) paths.push_back(p);
  return paths;
}

class GroupedGemmPacks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (packing_paths().empty())
      GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU: no path reads packs";
  }
};

TEST_F(GroupedGemmPacks, EqualThePerCallPackingBitForBit) {
  const int saved = omp_get_max_threads();
  for (const GroupedGemmPath path : packing_paths()) {
    const ScopedGroupedGemmPath forced(true, path);
    ASSERT_TRUE(grouped_bf16_reads_packs());
    for (const Case c : {Case{64, 48}, Case{40, 33}, Case{96, 130}, Case{600, 40}})
      for (int threads : {1, 3}) {
        SCOPED_TRACE(grouped_gemm_isa(true) + ", C " + std::to_string(c.C) + " OC " +
                     std::to_string(c.OC) + ", " + std::to_string(threads) + " threads");
        omp_set_num_threads(threads);
        const Operands o(c, 1);
        EXPECT_TRUE(same_bits(products(o, o.weight_pointers(), &o),
                              products(o, o.weight_pointers(), nullptr)));
      }
  }
  omp_set_num_threads(saved);
}

// The packs are what a call multiplies by (not a copy it ignores): given another weight's
// packs, it computes that weight's products.
TEST_F(GroupedGemmPacks, ACallReadsThePacksNotTheWeights) {
  for (const GroupedGemmPath path : packing_paths()) {
    const ScopedGroupedGemmPath forced(true, path);
    SCOPED_TRACE(grouped_gemm_isa(true));
    const Operands o(Case{40, 33}, 1), other(Case{40, 33}, 7);
    const std::vector<float> want = products(o, o.weight_pointers(), nullptr);
    EXPECT_TRUE(same_bits(products(o, other.weight_pointers(), &o), want));
    EXPECT_FALSE(same_bits(products(o, other.weight_pointers(), nullptr), want));
  }
}

TEST(GroupedGemmPackSize, IsTheWholeMatrixInPanelsOfTheAmxStep) {
  // forward: K = C rounded to 32 (pairs), N = OC rounded to 16; backward_input: transposed.
  EXPECT_EQ(grouped_bf16_packed_size(GroupedPack::forward, 40, 33), size_t(32) * 48);
  EXPECT_EQ(grouped_bf16_packed_size(GroupedPack::backward_input, 40, 33), size_t(32) * 48);
  EXPECT_EQ(grouped_bf16_packed_size(GroupedPack::forward, 512, 256), size_t(256) * 256);
  EXPECT_EQ(grouped_bf16_packed_size(GroupedPack::backward_input, 512, 256), size_t(128) * 512);
}

}  // namespace
}  // namespace mt
