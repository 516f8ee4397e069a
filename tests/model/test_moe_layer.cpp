// The MoE layer on one rank: finite-difference gradients (experts, router through the gates
// and the aux loss, input), load accounting, slot independence, and both balancing
// mechanisms on a deliberately imbalanced router. The routing rules and the drop order are
// kernel tests (tests/kernels/test_moe_kernels.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "kernels/matmul_bf16.h"
#include "kernels/token_permutation.h"
#include "model/expert_gemm.h"
#include "model/moe_test_util.h"

namespace mt {
namespace {

using moe_test::Harness;

// loss = sum(y * R) + aux_scale * aux, in double.
double loss_of(Harness& m, const std::vector<float>& h, const std::vector<float>& R, int N,
               float aux_scale) {
  const int C = int(h.size()) / N;
  std::vector<float> y(size_t(N) * C);
  m.layer->reset_stats();
  m.layer->forward(m.slot(), h.data(), y.data(), N);
  double L = 0;
  for (size_t i = 0; i < y.size(); ++i) L += double(y[i]) * R[i];
  return L + aux_scale * m.layer->stats().aux_sum;
}

void check_finite_differences(int k, float capacity, float aux_scale, bool zero_dy) {
  const int N = 24, C = 8, E = 4;
  const ModelConfig cfg = moe_test::config(C, E, k, capacity, /*alpha=*/0.5f);
  Harness m(cfg, {}, N);
  std::vector<float> h = moe_test::random_vec(size_t(N) * C, 1, 1);
  std::vector<float> R = moe_test::random_vec(size_t(N) * C, 1, 2);
  if (zero_dy) std::fill(R.begin(), R.end(), 0.0f);
  m.layer->set_aux_grad_scale(aux_scale);
  std::vector<float> y(size_t(N) * C), dh(size_t(N) * C);
  m.layer->forward(m.slot(), h.data(), y.data(), N);
  if (capacity > 0) {
    ASSERT_GT(m.layer->stats().dropped, 0) << "the case should drop";
  }
  m.layer->backward_input(m.slot(), h.data(), R.data(), dh.data(), N);
  m.layer->backward_weight(m.slot(), h.data(), N);

  // Routing is piecewise constant: a perturbation that flips a choice or a drop makes the
  // loss jump. Central differences at two step sizes agree on smooth stretches and not
  // across a jump, so a disagreement skips the element (a few are expected).
  auto central = [&](float& x, float step) {
    const float saved = x;
    x = saved + step;
    const double up = loss_of(m, h, R, N, aux_scale);
    x = saved - step;
    const double down = loss_of(m, h, R, N, aux_scale);
    x = saved;
    return (up - down) / (2 * step);
  };
  int checked = 0, skipped = 0;
  auto check = [&](float& x, float got, const std::string& what) {
    const double want = central(x, 1e-2f), half = central(x, 5e-3f);
    const double tol = 2e-3 + 2e-2 * std::fabs(want);
    if (std::fabs(want - half) > tol) {
      ++skipped;
      return;
    }
    EXPECT_NEAR(got, want, tol) << what;
    ++checked;
  };
  for (const ParamInfo& p : m.table.entries())
    for (size_t j = 0; j < 4; ++j) {
      const size_t i = (j * 7919 + 3) % p.numel;
      check(m.params.data()[p.offset + i], m.grads.data()[p.offset + i],
            p.name + "[" + std::to_string(i) + "]");
    }
  for (size_t i = 0; i < h.size(); i += 13) check(h[i], dh[i], "dh[" + std::to_string(i) + "]");
  EXPECT_LE(skipped, checked / 8) << "too many routing flips to test";
}

TEST(MoeLayer, FiniteDifferencesTop1Dropless) {
  check_finite_differences(1, 0, 1.0f, false);
}
TEST(MoeLayer, FiniteDifferencesTop2Capacity) {
  check_finite_differences(2, 0.75f, 1.0f, false);
}
TEST(MoeLayer, FiniteDifferencesAuxLossAlone) {
  check_finite_differences(2, 0, 3.0f, true);
}

TEST(MoeLayer, ExpertLoadSumsToAssignmentsMinusDrops) {
  const int N = 32, C = 8, E = 4;
  for (float capacity : {0.0f, 0.5f, 1.0f}) {
    Harness m(moe_test::config(C, E, 2, capacity), {}, N);
    std::vector<float> h = moe_test::random_vec(size_t(N) * C, 2, 1), y(size_t(N) * C);
    m.layer->forward(m.slot(), h.data(), y.data(), N);
    m.layer->forward(m.slot(), h.data(), y.data(), N / 2);
    const MoeStats& st = m.layer->stats();
    const int64_t kept = std::accumulate(st.load.begin(), st.load.end(), int64_t(0));
    const int64_t selected = std::accumulate(st.selected.begin(), st.selected.end(), int64_t(0));
    EXPECT_EQ(st.assignments, int64_t(N + N / 2) * 2);
    EXPECT_EQ(selected, st.assignments);
    EXPECT_EQ(kept, st.assignments - st.dropped);
    if (capacity > 0) {
      EXPECT_GT(st.dropped, 0) << capacity;
      const int cap = expert_capacity(N, E, 2, capacity) + expert_capacity(N / 2, E, 2, capacity);
      for (int e = 0; e < E; ++e) EXPECT_LE(st.load[e], cap);
    } else {
      EXPECT_EQ(st.dropped, 0);
    }
    EXPECT_EQ(st.groups, 2);
  }
}

TEST(MoeLayer, MicrobatchSlotsAreIndependent) {
  // Pipeline order F0 F1 B1 B0 (W deferred) gives the gradients of F0 B0 F1 B1.
  const int N = 16, C = 8, E = 4;
  const ModelConfig cfg = moe_test::config(C, E, 2, 1.0f);
  Harness a(cfg, {}, N, 2), b(cfg, {}, N, 1);
  std::vector<float> h0 = moe_test::random_vec(size_t(N) * C, 3, 1);
  std::vector<float> h1 = moe_test::random_vec(size_t(N) * C, 3, 2);
  std::vector<float> dy = moe_test::random_vec(size_t(N) * C, 3, 3);
  std::vector<float> y0(h0.size()), y1(h0.size()), d0(h0.size()), d1(h0.size()), y(h0.size()),
      d(h0.size());
  a.layer->forward(a.slot(0), h0.data(), y0.data(), N);
  a.layer->forward(a.slot(1), h1.data(), y1.data(), N);
  a.layer->backward_input(a.slot(1), h1.data(), dy.data(), d1.data(), N);
  a.layer->backward_input(a.slot(0), h0.data(), dy.data(), d0.data(), N);
  a.layer->backward_weight(a.slot(0), h0.data(), N);
  a.layer->backward_weight(a.slot(1), h1.data(), N);
  for (auto [hp, yp, dp] : {std::tuple{&h0, &y0, &d0}, std::tuple{&h1, &y1, &d1}}) {
    b.layer->forward(b.slot(), hp->data(), y.data(), N);
    b.layer->backward_input(b.slot(), hp->data(), dy.data(), d.data(), N);
    b.layer->backward_weight(b.slot(), hp->data(), N);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(y[i], (*yp)[i]) << i;
      ASSERT_EQ(d[i], (*dp)[i]) << i;
    }
  }
  for (size_t i = 0; i < a.table.total(); ++i)
    ASSERT_NEAR(a.grads.data()[i], b.grads.data()[i], 1e-5 + 1e-5 * std::fabs(b.grads.data()[i]));
}

// Relative L2 difference of a against b.
double rel_l2(const float* a, const float* b, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    r += double(b[i]) * b[i];
  }
  return std::sqrt(d / std::max(r, 1e-300));
}

// --precision bf16: the experts multiply bf16-rounded weights and inputs with fp32
// accumulation; the router stays fp32. Against the fp32 layer on the same weights and input:
//   - routing is identical (the router reads the same fp32 h with the same fp32 weights);
//   - y, dh and every gradient differ, by more than fp32 rounding could (1e-5 relative L2:
//     the fp32 layer agrees with itself bitwise) and by no more than bf16 rounding does:
//     each GEMM operand is rounded to 8 significant bits (relative error <= 2^-9 per element),
//     so a product is off by ~2^-9 relative in L2 (errors of random sign), and y, dh and the
//     gradients go through two or three such GEMMs and GELU: a few 2^-9 ~ 1e-2. Bound 3e-2.
// N = 24 runs every GEMM on zero-padded 64-row chunks; N = 300 (dropless top-2: ~150 rows
// an expert) on 128- and 64-row chunks plus a padded remainder (moe_layer.h).
TEST(MoeLayer, Bf16ExpertsStayWithinBf16RoundingOfFp32) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU (needs AVX-512)";
  const int C = 32, E = 4;
  const ModelConfig cfg = moe_test::config(C, E, 2, 0.0f);
  for (int N : {24, 300}) {
    SCOPED_TRACE("N " + std::to_string(N));
    uint64_t version = 1;
    ExpertParallelShard ep16;
    ep16.bf16_version = &version;
    Harness f(cfg, {}, N), b(cfg, ep16, N);
    EXPECT_EQ(f.layer->bf16_weight_bytes(), 0u);
    // Each expert's c_fc and c_proj: the bf16 copy and the AMX path's two packs of each.
    EXPECT_EQ(b.layer->bf16_weight_bytes(),
              size_t(E) * (Bf16ExpertWeights::expert_bytes(C, cfg.hidden()) +
                           Bf16ExpertWeights::expert_bytes(cfg.hidden(), C)));
    std::vector<float> h = moe_test::random_vec(size_t(N) * C, 5, 1);
    std::vector<float> dy = moe_test::random_vec(size_t(N) * C, 5, 2);
    std::vector<float> yf(h.size()), yb(h.size()), dhf(h.size()), dhb(h.size());
    for (Harness* m : {&f, &b}) {
      const bool bf = m == &b;
      m->layer->forward(m->slot(), h.data(), (bf ? yb : yf).data(), N);
      m->layer->backward_input(m->slot(), h.data(), dy.data(), (bf ? dhb : dhf).data(), N);
      m->layer->backward_weight(m->slot(), h.data(), N);
    }
    EXPECT_EQ(f.layer->stats().load, b.layer->stats().load);
    EXPECT_EQ(f.layer->stats().dropped, 0);
    std::vector<std::pair<std::string, double>> errs = {
        {"y", rel_l2(yb.data(), yf.data(), yf.size())},
        {"dh", rel_l2(dhb.data(), dhf.data(), dhf.size())}};
    for (const ParamInfo& p : f.table.entries())
      errs.push_back({p.name, rel_l2(b.grad(p.name), f.grad(p.name), p.numel)});
    for (const auto& [what, err] : errs) {
      EXPECT_GT(err, 1e-5) << what;
      EXPECT_LT(err, 3e-2) << what;
    }
    double worst = 0;
    for (size_t i = 2; i < errs.size(); ++i) worst = std::max(worst, errs[i].second);
    std::printf("N %d: y %.2e  dh %.2e  worst gradient %.2e\n", N, errs[0].second, errs[1].second,
                worst);
  }
}

// A router that sends every token to expert 0 first: feature 0 of h is ~3 for all tokens
// and router row 0 weighs it heavily.
struct Imbalanced {
  static constexpr int N = 64, C = 8, E = 4;
  Harness m;
  std::vector<float> h, y;
  Imbalanced(float alpha, float gamma)
      : m(moe_test::config(C, E, 1, 0, alpha, gamma), {}, N),
        h(moe_test::random_vec(size_t(N) * C, 4, 1, 0.5f)),
        y(size_t(N) * C) {
    for (int n = 0; n < N; ++n) h[size_t(n) * C] += 3.0f;
    float* wr = m.params.data() + m.table.at("transformer.h.0.mlp.router.weight").offset;
    for (int e = 0; e < E; ++e) wr[size_t(e) * C] = e == 0 ? 1.0f : 0.0f;
  }
  // Max load over the mean load, of one forward.
  double imbalance() {
    m.layer->reset_stats();
    m.layer->forward(m.slot(), h.data(), y.data(), N);
    const auto& load = m.layer->stats().selected;
    return double(*std::max_element(load.begin(), load.end())) * E / N;
  }
};

TEST(MoeBalance, RouterBiasUpdateRebalances) {
  Imbalanced t(0.0f, 0.01f);
  const double before = t.imbalance();
  ASSERT_GT(before, 3.0);  // nearly everything on expert 0
  // The sign update settles into an oscillation of about gamma around balance: average
  // the imbalance over the last steps.
  double after = 0;
  for (int step = 0; step < 120; ++step) {
    const double now = t.imbalance();
    if (step >= 100) after += now / 20;
    t.m.layer->update_router_bias(t.m.layer->stats().selected.data());
  }
  EXPECT_LT(after, 1.6) << "from " << before;
  EXPECT_LT(t.m.layer->router_bias()[0], 0.0f);  // the overloaded expert was pushed down
}

TEST(MoeBalance, AuxLossRebalances) {
  // Only the aux loss is differentiated (dy = 0); plain SGD on the router weight.
  Imbalanced t(1.0f, 0.0f);
  const int N = Imbalanced::N, C = Imbalanced::C;
  std::vector<float> dy(size_t(N) * C, 0.0f), dh(size_t(N) * C);
  const ParamInfo& wr = t.m.table.at("transformer.h.0.mlp.router.weight");
  const double before = t.imbalance();
  const double aux_before = t.m.layer->stats().aux_sum;
  ASSERT_GT(before, 3.0);
  for (int step = 0; step < 60; ++step) {
    t.m.grads.zero();
    t.imbalance();
    t.m.layer->backward_input(t.m.slot(), t.h.data(), dy.data(), dh.data(), N);
    t.m.layer->backward_weight(t.m.slot(), t.h.data(), N);
    for (size_t i = 0; i < wr.numel; ++i)
      t.m.params.data()[wr.offset + i] -= 0.5f * t.m.grads.data()[wr.offset + i];
  }
  const double after = t.imbalance();
  // Routing is piecewise constant, so the exact trajectory depends on rounding (-O2 and -O3
  // builds land at different imbalances); the claim is that the aux loss falls and the
  // imbalance measurably with it.
  EXPECT_LT(after, before - 0.5) << "from " << before;
  EXPECT_LT(t.m.layer->stats().aux_sum, aux_before);
}

}  // namespace
}  // namespace mt
