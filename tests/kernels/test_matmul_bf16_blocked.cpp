// The bf16 forward on the weight blocked once per change (kernels/matmul_bf16_blocked.h):
// the packer writes exactly oneDNN's layout, the forward on it has the plain forward's bits,
// and a layer's blocked copy follows the weight version like its plain copy.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/kernel_harness.h"
#include "kernels/matmul_bf16.h"
#include "kernels/matmul_bf16_blocked.h"

namespace mt::test {
namespace {

// oneDNN's own reorder of the plain weight (as B = weight^T, (C, OC) with strides (1, C))
// into BA16a64b2a: the packer's output must be that, padding (zeros) included. Full blocks,
// edge blocks in K and N, and an odd C (no 32-bit pairs).
TEST(Bf16BlockedWeight, PackerWritesOneDnnsLayout) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  using dnnl::memory;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream st(eng);
  const int shapes[][2] = {{256, 768}, {128, 128}, {1024, 256}, {96, 70}, {33, 65}, {7, 3}};
  for (const auto& [C, OC] : shapes) {
    std::vector<bf16> w = to_bf16_vec(random_normal(size_t(OC) * C, 71));
    const size_t n = matmul_bf16_blocked_weight_size(C, OC);
    const memory::desc plain({C, OC}, memory::data_type::bf16, {1, C}),
        blocked({C, OC}, memory::data_type::bf16, memory::format_tag::BA16a64b2a);
    ASSERT_EQ(blocked.get_size(), n * sizeof(bf16)) << C << " x " << OC;
    std::vector<bf16> want(n, bf16(0x7fff)), got(n, bf16(0x7fff));
    memory src(plain, eng, w.data()), dst(blocked, eng, want.data());
    dnnl::reorder(src, dst).execute(st, src, dst);
    st.wait();
    matmul_bf16_block_weight(got.data(), w.data(), C, OC);
    EXPECT_EQ(got, want) << C << " x " << OC;
  }
}

// Same kernel, same summation order: the blocked forward's bits are the plain forward's on
// the path that runs it (the default mixed path's forwards with a bias, or the primitive's),
// at row counts of one piece, of several (matmul_bf16_row_pieces) and of one row.
TEST(Bf16Matmul, BlockedForwardHasThePlainForwardsBits) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  const int C = 256, OC = 768;
  if (!matmul_bf16_forward_blocked_available(C, OC, true))
    GTEST_SKIP() << "the primitive takes another layout here: the forward reads the plain copy";
  const std::vector<bf16> w = to_bf16_vec(random_normal(size_t(OC) * C, 72));
  const Buf bias = random_normal(OC, 73);
  std::vector<bf16> blocked(matmul_bf16_blocked_weight_size(C, OC));
  matmul_bf16_block_weight(blocked.data(), w.data(), C, OC);
  for (const int N : {1024, 203, 1}) {
    const std::vector<bf16> x = to_bf16_vec(random_normal(size_t(N) * C, 74));
    Buf plain(size_t(N) * OC), on_blocked(size_t(N) * OC, 9.0f);
    matmul_bf16_forward(plain.data(), x.data(), w.data(), bias.data(), N, C, OC);
    matmul_bf16_forward_blocked(on_blocked.data(), x.data(), blocked.data(), bias.data(), N, C, OC);
    EXPECT_EQ(on_blocked, plain) << N << " rows";
  }
}

// A layer's blocked copy is made from the weights of the current version, once per version:
// the forward after a change reads the new weights (the copy is not stale), and a layer
// without a bias in its forward, or narrower than 256 (d128's), keeps none.
TEST(Bf16Matmul, DenseWeightsBlockedCopyFollowsTheVersion) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  const int N = 64, C = 256, OC = 320;  // both >= 256: a layer that blocks (dense_gemm_bf16.cpp)
  uint64_t version = 0;
  DenseBf16Weight biased(C, OC, &version, true), plain_only(C, OC, &version, false);
  if (biased.runs_on_tiles() || !matmul_bf16_forward_blocked_available(C, OC, true))
    GTEST_SKIP() << "the forward reads no blocked copy on this CPU";
  EXPECT_EQ(biased.bytes(),
            (size_t(C) * OC + matmul_bf16_blocked_weight_size(C, OC)) * sizeof(bf16));
  Buf w = random_normal(size_t(OC) * C, 75);
  const Buf bias = random_normal(OC, 76);
  const std::vector<bf16> x = to_bf16_vec(random_normal(size_t(N) * C, 77));
  EXPECT_EQ(plain_only.blocked(w.data(), bias.data()), nullptr);
  DenseBf16Weight narrow(128, OC, &version, true);
  EXPECT_EQ(narrow.bytes(), DenseBf16Weight::bytes(128, OC, false));
  EXPECT_EQ(narrow.blocked(w.data(), bias.data()), nullptr);
  EXPECT_EQ(biased.blocked(w.data(), nullptr), nullptr);
  auto forward = [&](DenseBf16Weight& layer) {
    Buf y(size_t(N) * OC);
    dense_bf16_forward(y.data(), x.data(), layer, w.data(), bias.data(), N);
    return y;
  };
  EXPECT_EQ(forward(biased), forward(plain_only));
  const bf16* first = biased.blocked(w.data(), bias.data());
  for (float& v : w) v *= -0.5f;
  EXPECT_EQ(biased.blocked(w.data(), bias.data()), first);  // same version: kept as it was
  ++version;
  const Buf after = forward(biased);
  EXPECT_EQ(after, forward(plain_only));
  Buf y(size_t(N) * OC);
  matmul_bf16_forward(y.data(), x.data(), to_bf16_vec(w).data(), bias.data(), N, C, OC);
  EXPECT_EQ(after, y);
}

}  // namespace
}  // namespace mt::test
