// The routing rules of the MoE kernels (kernels/router.h, kernels/token_permutation.h),
// checked on the fast kernels and on their reference twins alike: top-k order and ties,
// the bias selecting without changing the gates, capacity drops in token-major order and
// the stable sort by expert. Fast vs reference on random data and the gradients are in
// test_kernel_ops.cpp. Also: the dispatch plan of both twins agrees on random routings, and
// the fused permutations (the bf16 gather, the one-pass adjoint of combine) give the bits of
// the passes they replace.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/bf16.h"
#include "kernels/kernel_harness.h"
#include "kernels/reference/reference.h"
#include "kernels/router.h"
#include "kernels/token_permutation.h"

namespace mt {
namespace {

class MoeRouting : public ::testing::TestWithParam<bool> {};  // true: the reference twin

#define MT_TWIN(fn, ...) (GetParam() ? ::mt::ref::fn(__VA_ARGS__) : ::mt::fn(__VA_ARGS__))

TEST_P(MoeRouting, TopKTiesGoToTheLowerIndexAndBiasOnlySelects) {
  // Row 0: experts 1 and 3 tie for first, 0 and 2 for third.
  const float probs[2 * 4] = {0.2f, 0.3f, 0.2f, 0.3f, 0.1f, 0.2f, 0.3f, 0.4f};
  int32_t ex[2 * 3];  // room for the k = 3 call below
  float g[2 * 3];
  MT_TWIN(router_top_k, ex, g, probs, nullptr, 2, 4, 2);
  EXPECT_EQ(ex[0], 1);
  EXPECT_EQ(ex[1], 3);
  EXPECT_EQ(ex[2], 3);
  EXPECT_EQ(ex[3], 2);
  EXPECT_FLOAT_EQ(g[0] + g[1], 1.0f);
  EXPECT_FLOAT_EQ(g[2], 0.4f / 0.7f);
  MT_TWIN(router_top_k, ex, g, probs, nullptr, 2, 4, 3);  // third place: tie 0 vs 2 -> 0
  EXPECT_EQ(ex[2], 0);
  // The bias moves expert 0 to the front of row 1; its gate stays the unbiased prob (k=1).
  const float bias[4] = {0.5f, 0, 0, 0};
  MT_TWIN(router_top_k, ex, g, probs, bias, 2, 4, 1);
  EXPECT_EQ(ex[0], 0);
  EXPECT_EQ(ex[1], 0);
  EXPECT_FLOAT_EQ(g[1], 0.1f);
}

TEST_P(MoeRouting, DropsTokenMajorAndSortsStably) {
  // 4 tokens, k = 2, 3 experts, capacity 2. Token-major order of (token, choice):
  // (0:0,1) (1:0,2) (2:0,1) (3:2,0) -> expert 0 keeps (0,0),(1,0); drops (2,0),(3,1).
  const int32_t experts[8] = {0, 1, 0, 2, 0, 1, 2, 0};
  int32_t counts[3], row_of[8], row_token[8];
  const int M = MT_TWIN(plan_dispatch, counts, row_of, row_token, experts, 4, 3, 2, 2);
  EXPECT_EQ(M, 6);
  EXPECT_EQ(counts[0], 2);
  EXPECT_EQ(counts[1], 2);
  EXPECT_EQ(counts[2], 2);
  const int32_t want_row_of[8] = {0, 2, 1, 4, -1, 3, 5, -1};
  const int32_t want_token[6] = {0, 1, 0, 2, 1, 3};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(row_of[i], want_row_of[i]) << i;
  for (int i = 0; i < 6; ++i) EXPECT_EQ(row_token[i], want_token[i]) << i;
}

TEST(MoeCapacity, CeilOfTheFairShare) {
  EXPECT_EQ(expert_capacity(24, 4, 2, 0.75f), 9);
  EXPECT_EQ(expert_capacity(10, 4, 1, 1.0f), 3);
  EXPECT_EQ(expert_capacity(10, 4, 1, 0), 0);
}

TEST(MoePlan, FastMatchesReference) {
  for (int capacity : {0, 1, 3, 7})
    for (int k : {1, 2, 4}) {
      const int N = 37, E = 5;
      std::vector<int> r = test::random_ints(size_t(N) * k, 60 + k, 0, E - 1);
      std::vector<int32_t> experts(r.begin(), r.end());  // repeats within a token allowed
      std::vector<int32_t> c1(E), c2(E), o1(r.size()), o2(r.size()), t1(r.size()), t2(r.size());
      const int m1 =
          plan_dispatch(c1.data(), o1.data(), t1.data(), experts.data(), N, E, k, capacity);
      const int m2 =
          ref::plan_dispatch(c2.data(), o2.data(), t2.data(), experts.data(), N, E, k, capacity);
      ASSERT_EQ(m1, m2) << "capacity " << capacity << " k " << k;
      EXPECT_EQ(c1, c2);
      EXPECT_EQ(o1, o2);
      t1.resize(m1), t2.resize(m2);
      EXPECT_EQ(t1, t2);
    }
}

// Context parallelism's zigzag (model/route_group.h): a group of 4 chunks of tokens, rank 0
// holding chunks 0 and 3, rank 1 chunks 1 and 2. Each rank plans its own rows with, per
// segment, the other rank's choices that come before it: every assignment is kept or dropped
// exactly as when one rank plans the whole group in token order.
TEST(MoePlan, HeldChoicesPerSegmentDropAsTheWholeGroup) {
  const int chunk = 9, N = 4 * chunk, E = 3, k = 2;
  const std::vector<int> r = test::random_ints(size_t(N) * k, 77, 0, E - 1);
  const std::vector<int32_t> all(r.begin(), r.end());
  for (int capacity : {1, 4, 7, 12}) {
    std::vector<int32_t> c(E), o(all.size()), t(all.size());
    plan_dispatch(c.data(), o.data(), t.data(), all.data(), N, E, k, capacity);
    const std::vector<std::vector<int>> chunks_of = {{0, 3}, {1, 2}};
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<int32_t> mine, ends;
      std::vector<int64_t> held;
      for (int ch : chunks_of[size_t(rank)]) {
        mine.insert(mine.end(), all.begin() + ch * chunk * k, all.begin() + (ch + 1) * chunk * k);
        ends.push_back(int32_t(mine.size() / k));
        // The other rank's chunks before this one.
        std::vector<int64_t> h(E, 0);
        for (int other : chunks_of[size_t(1 - rank)])
          if (other < ch)
            for (int a = other * chunk * k; a < (other + 1) * chunk * k; ++a) ++h[size_t(all[a])];
        held.insert(held.end(), h.begin(), h.end());
      }
      const HeldChoices hc{held.data(), ends.data(), 2};
      for (bool reference : {false, true}) {
        const int n = 2 * chunk;
        std::vector<int32_t> c2(E), o2(mine.size()), t2(mine.size());
        if (reference)
          ref::plan_dispatch(c2.data(), o2.data(), t2.data(), mine.data(), n, E, k, capacity, hc);
        else
          plan_dispatch(c2.data(), o2.data(), t2.data(), mine.data(), n, E, k, capacity, hc);
        for (int j = 0; j < 2; ++j) {
          const int ch = chunks_of[size_t(rank)][size_t(j)];
          for (int a = 0; a < chunk * k; ++a)
            EXPECT_EQ(o2[size_t(j * chunk * k + a)] >= 0, o[size_t(ch * chunk * k + a)] >= 0)
                << "capacity " << capacity << " rank " << rank << " chunk " << ch << " a " << a
                << (reference ? " reference" : " fast");
        }
      }
    }
  }
}

// A routing with capacity drops: row_of (N, k), row_token (M); returns M.
int drop_some(std::vector<int32_t>& row_of, std::vector<int32_t>& row_token, int N, int E, int k) {
  std::vector<int> r = test::random_ints(size_t(N) * k, 91, 0, E - 1);
  std::vector<int32_t> experts(r.begin(), r.end()), counts(E);
  row_of.resize(r.size()), row_token.resize(r.size());
  const int M =
      plan_dispatch(counts.data(), row_of.data(), row_token.data(), experts.data(), N, E, k, 5);
  EXPECT_LT(M, N * k) << "capacity 5 should drop some of " << N * k;
  return M;
}

std::vector<bf16> rounded(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  to_bf16(out.data(), x.data(), x.size());
  return out;
}

TEST(MoePermutation, Bf16GatherIsTheFp32GatherRounded) {
  const int N = 29, E = 4, k = 2, C = 37;  // C not a multiple of the vector width
  std::vector<int32_t> row_of, row_token;
  const int M = drop_some(row_of, row_token, N, E, k);
  const test::Buf h = test::random_normal(size_t(N) * C, 5);
  std::vector<float> rows(size_t(M) * C);
  std::vector<bf16> rows16(rows.size());
  gather_rows(rows.data(), h.data(), row_token.data(), M, C);
  gather_rows(rows16.data(), h.data(), row_token.data(), M, C);
  EXPECT_EQ(rows16, rounded(rows));
}

// The adjoint of combine in one pass: dgates and the scaled rows bit for bit those of
// combine_rows_backward_gates then gather_rows_scaled, in place too; bf16 rows rounded.
TEST(MoePermutation, OnePassCombineBackwardIsTheTwoPasses) {
  const int N = 29, E = 4, k = 2, C = 37;
  std::vector<int32_t> row_of, row_token;
  const int M = drop_some(row_of, row_token, N, E, k);
  const test::Buf dy = test::random_normal(size_t(N) * C, 6),
                  y = test::random_normal(size_t(M) * C, 7);
  const test::Buf gates = test::random_normal(size_t(N) * k, 8);
  std::vector<float> want_dg(size_t(N) * k), want_rows(size_t(M) * C);
  combine_rows_backward_gates(want_dg.data(), dy.data(), y.data(), row_of.data(), N, k, C);
  gather_rows_scaled(want_rows.data(), dy.data(), row_of.data(), gates.data(), N, k, C);

  std::vector<float> dg(want_dg.size(), -1), rows(want_rows.size(), -1);
  combine_rows_backward(dg.data(), rows.data(), dy.data(), y.data(), row_of.data(), gates.data(), N,
                        k, C);
  EXPECT_EQ(dg, want_dg);
  EXPECT_EQ(rows, want_rows);

  std::vector<float> in_place(y.data(), y.data() + y.size());
  std::fill(dg.begin(), dg.end(), -1);
  combine_rows_backward(dg.data(), in_place.data(), dy.data(), in_place.data(), row_of.data(),
                        gates.data(), N, k, C);
  EXPECT_EQ(dg, want_dg);
  EXPECT_EQ(in_place, want_rows);

  std::vector<bf16> rows16(want_rows.size());
  std::fill(dg.begin(), dg.end(), -1);
  combine_rows_backward(dg.data(), rows16.data(), dy.data(), y.data(), row_of.data(), gates.data(),
                        N, k, C);
  EXPECT_EQ(dg, want_dg);
  EXPECT_EQ(rows16, rounded(want_rows));
}

INSTANTIATE_TEST_SUITE_P(Twins, MoeRouting, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "reference" : "fast";
                         });

}  // namespace
}  // namespace mt
