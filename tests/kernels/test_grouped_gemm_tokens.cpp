// The bf16 grouped GEMMs that sum their rows into token rows in their store (grouped_gemm.h,
// *_into_tokens) against the GEMM followed by the row-order sums they replace
// (token_permutation.h: combine_rows_in_row_order, scatter_add_rows_in_row_order), bit for
// bit: with and without packed weights, a routing with capacity drops (tokens with fewer
// rows, or none), K short of a tile step (A copied to a padded stage) and columns short of
// a tile (the edge stage).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "kernels/bf16.h"
#include "kernels/grouped_gemm.h"
#include "kernels/token_permutation.h"

namespace mt {
namespace {

constexpr int kTokens = 37, kExperts = 4, kTopk = 2;

std::vector<float> random32(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(normal01(29, stream, i));
  return v;
}

std::vector<bf16> random16(size_t n, uint64_t stream) {
  const std::vector<float> v = random32(n, stream);
  std::vector<bf16> out(n);
  to_bf16(out.data(), v.data(), n);
  return out;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// A routing of kTokens tokens with capacity drops: row_of (N, k), row_token (M), the
// experts' row offsets and each row's gate.
struct Routing {
  std::vector<int32_t> row_of, row_token, offset;
  std::vector<float> gates, gate_of_row;
  int M = 0;
  Routing() : row_of(kTokens * kTopk), row_token(kTokens * kTopk), offset(kExperts + 1) {
    std::vector<int32_t> experts(kTokens * kTopk), counts(kExperts);
    for (int n = 0; n < kTokens; ++n)
      for (int j = 0; j < kTopk; ++j) experts[n * kTopk + j] = (n * 7 + j * (1 + n % 3)) % kExperts;
    M = plan_dispatch(counts.data(), row_of.data(), row_token.data(), experts.data(), kTokens,
                      kExperts, kTopk, /*capacity=*/15);
    for (int e = 0; e < kExperts; ++e) offset[e + 1] = offset[e] + counts[e];
    gates = random32(row_of.size(), 1);
    gate_of_row.assign(size_t(M), 0);
    for (size_t a = 0; a < row_of.size(); ++a)
      if (row_of[a] >= 0) gate_of_row[size_t(row_of[a])] = gates[a];
  }
};

struct Weights {
  std::vector<bf16> data;
  std::vector<const bf16*> ptr;
  std::vector<std::vector<uint32_t>> packs;
  std::vector<const uint32_t*> pack_ptr;
  Weights(int C, int OC, GroupedPack which) : data(random16(size_t(kExperts) * C * OC, 2)) {
    for (int g = 0; g < kExperts; ++g) {
      ptr.push_back(data.data() + size_t(g) * C * OC);
      packs.emplace_back(grouped_bf16_packed_size(which, C, OC));
      grouped_bf16_pack(packs.back().data(), which, ptr.back(), C, OC);
      pack_ptr.push_back(packs.back().data());
    }
  }
  const uint32_t* const* packed(bool on) const { return on ? pack_ptr.data() : nullptr; }
};

class GroupedGemmTokens : public ::testing::Test {
 protected:
  void SetUp() override {
    set_compute_threads(1);
    if (!grouped_bf16_sums_into_tokens())
      GTEST_SKIP() << "no AMX on this CPU: the sums run over the stored rows there";
  }
  void TearDown() override { set_compute_threads(saved_); }
  int saved_ = compute_threads();
};

TEST_F(GroupedGemmTokens, ForwardIsTheGemmThenTheRowOrderCombine) {
  const Routing r;
  ASSERT_LT(r.M, kTokens * kTopk) << "capacity 15 should drop some assignments";
  for (const auto& [C, OC] : {std::pair{48, 40}, std::pair{64, 64}}) {
    const Weights w(C, OC, GroupedPack::forward);
    const std::vector<bf16> x = random16(size_t(r.M) * C, 3);
    for (const bool packed : {false, true}) {
      std::vector<float> rows(size_t(r.M) * OC), want(size_t(kTokens) * OC);
      grouped_matmul_bf16_forward(rows.data(), x.data(), w.ptr.data(), r.offset.data(), kExperts, C,
                                  OC, w.packed(packed));
      combine_rows_in_row_order(want.data(), rows.data(), r.row_of.data(), r.gates.data(), kTokens,
                                kTopk, OC);
      std::vector<float> kept(rows.size(), -1), tokens(want.size(), 0);
      grouped_matmul_bf16_forward_into_tokens(
          tokens.data(), r.row_token.data(), r.gate_of_row.data(), kept.data(), x.data(),
          w.ptr.data(), r.offset.data(), kExperts, C, OC, w.packed(packed));
      EXPECT_TRUE(same_bits(tokens, want)) << "C " << C << " OC " << OC << " packed " << packed;
      EXPECT_TRUE(same_bits(kept, rows)) << "C " << C << " OC " << OC << " packed " << packed;
    }
  }
}

TEST_F(GroupedGemmTokens, BackwardInputIsTheGemmThenTheRowOrderScatterAdd) {
  const Routing r;
  for (const auto& [C, OC] : {std::pair{40, 48}, std::pair{64, 64}}) {
    const Weights w(C, OC, GroupedPack::backward_input);
    const std::vector<bf16> dout = random16(size_t(r.M) * OC, 4);
    for (const bool packed : {false, true}) {
      std::vector<float> rows(size_t(r.M) * C), want(size_t(kTokens) * C);
      grouped_matmul_bf16_backward_input(rows.data(), dout.data(), w.ptr.data(), r.offset.data(),
                                         kExperts, C, OC, false, w.packed(packed));
      scatter_add_rows_in_row_order(want.data(), rows.data(), r.row_of.data(), kTokens, kTopk, C);
      std::vector<float> tokens(want.size(), 0);
      grouped_matmul_bf16_backward_input_into_tokens(tokens.data(), r.row_token.data(), dout.data(),
                                                     w.ptr.data(), r.offset.data(), kExperts, C, OC,
                                                     w.packed(packed));
      EXPECT_TRUE(same_bits(tokens, want)) << "C " << C << " OC " << OC << " packed " << packed;
    }
  }
}

// The row-order sums are the choice-order ones up to rounding: the same terms, another order.
TEST(TokenRowOrderSums, AreTheChoiceOrderSumsUpToRounding) {
  const Routing r;
  const int C = 24;
  const std::vector<float> rows = random32(size_t(r.M) * C, 5);
  std::vector<float> a(size_t(kTokens) * C), b(a.size());
  combine_rows(a.data(), rows.data(), r.row_of.data(), r.gates.data(), kTokens, kTopk, C);
  combine_rows_in_row_order(b.data(), rows.data(), r.row_of.data(), r.gates.data(), kTokens, kTopk,
                            C);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f) << i;
  scatter_add_rows(a.data(), rows.data(), r.row_of.data(), kTokens, kTopk, C);
  scatter_add_rows_in_row_order(b.data(), rows.data(), r.row_of.data(), kTokens, kTopk, C);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f) << i;
}

}  // namespace
}  // namespace mt
