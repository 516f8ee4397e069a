// Flash attention's bf16 products against its fp32 kernel on the same inputs, element by
// element within the rounding bound carried through the algorithm (first order in the bf16
// unit roundoff u = 2^-8 and the fp32 one e = 2^-24; products of two error terms are covered
// by the (1 + u)^2 factors), sums over the visible keys j of query row i:
//   scores  |dS_ij| <= eS_ij = ka scale sum_d |q_id k_jd|, ka = 2u + u^2 + 2 (hd + 1) e
//           (both operands rounded, both sides' fp32 sums)
//   forward moving each score of row i by <= m_i = max_j eS_ij moves p_ij by a factor in
//           [e^-2m_i, e^2m_i]: d_i = e^(2 m_i) - 1 + 2 sm, sm = (Tk + 2 blocks + 16) e for the
//           online softmax's sums and rescalings;
//           out_id: sum_j p_ij |v_jd| ((1 + d_i)(1 + u)^2 - 1 + acc) (p and v rounded),
//           lse_i: m_i + 2 sm
//   backward, both given fp32's lse and D: P recomputed from the bf16 scores,
//           eP_ij = p_ij (e^eS_ij - 1 + 2 (|s_ij - lse_i| + 4) e); dP_ij = sum_d g_id v_jd
//           with e1_ij = ka sum_d |g_id v_jd|; dS = scale P (dP - D):
//           eDS_ij = scale (eP_ij (|dP_ij - D_i| + e1_ij) + p_ij e1_ij) + 4 e |dS_ij|;
//           dq_id: sum_j (eDS_ij (1 + u)^2 + (r2 + acc) |dS_ij|) |k_jd|, dk_jd likewise with
//           q over the group's query rows, dv_jd: sum_i (eP_ij (1 + u)^2 + (r2 + acc) p_ij)
//           |g_id|; r2 = (1 + u)^2 - 1, acc = 2 (n + 1) e for sums of n terms.
// It also asserts that the bf16 results differ from fp32 by more than fp32 rounding could
// (the products really are bf16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "kernels/flash_attention.h"
#include "kernels/flash_test_setup.h"
#include "kernels/kernel_harness.h"

namespace mt::test {
namespace {

constexpr double kU = 1.0 / 256, kE = 1.0 / 16777216.0;

using Bound = std::vector<double>;

// Largest |x - y| / bound (bound 0 only where x and y must agree exactly).
double worst_ratio(const Buf& x, const Buf& y, const Bound& bound) {
  double worst = 0;
  for (size_t i = 0; i < x.size(); i++) {
    const double diff = std::fabs(double(x[i]) - y[i]);
    if (diff == 0) continue;
    worst = std::max(worst, bound[i] > 0 ? diff / bound[i] : INFINITY);
  }
  return worst;
}

struct Bounds {
  Bound out, lse, dq, dkv;
};

// The exact (double) quantities of one (b, h, query row i) the bounds are made of.
struct Row {
  std::vector<int> keys;                 // visible key rows
  std::vector<double> s, p, eS, dP, e1;  // per visible key
  double lse = -INFINITY, D = 0, m = 0;
};

Row exact_row(const FlashSetup& s, const Bufs& in, const Buf& dout, int b, int h, int i) {
  const FlashAttention a = s.args(in);
  const int g = h / (a.H / a.Hkv), hd = a.hd;
  const double scale = 1.0 / std::sqrt(double(hd)), ka = 2 * kU + kU * kU + 2 * (hd + 1) * kE;
  const float* q = a.q + (size_t(b) * a.Tq + i) * a.ldq + size_t(h) * hd;
  const float* gy = dout.data() + (size_t(b) * a.Tq + i) * s.ldo() + size_t(h) * hd;
  Row r;
  for (int j = 0; j < a.Tk; j++) {
    if (a.kpos[j] > a.qpos[i]) continue;
    const float* k = a.k + (size_t(b) * a.Tk + j) * a.ldk + size_t(g) * hd;
    const float* v = a.v + (size_t(b) * a.Tk + j) * a.ldv + size_t(g) * hd;
    double qk = 0, aqk = 0, gv = 0, agv = 0;
    for (int d = 0; d < hd; d++) {
      qk += double(q[d]) * k[d], aqk += std::fabs(double(q[d]) * k[d]);
      gv += double(gy[d]) * v[d], agv += std::fabs(double(gy[d]) * v[d]);
    }
    r.keys.push_back(j);
    r.s.push_back(scale * qk), r.eS.push_back(ka * scale * aqk);
    r.dP.push_back(gv), r.e1.push_back(ka * agv);
    r.m = std::max(r.m, r.eS.back());
  }
  double mx = -INFINITY, sum = 0;
  for (double x : r.s) mx = std::max(mx, x);
  for (double x : r.s) sum += std::exp(x - mx);
  r.lse = mx + std::log(sum);
  for (size_t n = 0; n < r.keys.size(); n++) {
    r.p.push_back(std::exp(r.s[n] - r.lse));
    r.D += r.p.back() * r.dP[n];
  }
  return r;
}

Bounds bounds(const FlashSetup& s, const Bufs& in, const Buf& dout) {
  const FlashAttention a = s.args(in);
  const int hd = a.hd, nkb = (a.Tk + kFlashKeyBlock - 1) / kFlashKeyBlock;
  const double scale = 1.0 / std::sqrt(double(hd)), r2 = (1 + kU) * (1 + kU) - 1;
  const double sm = (a.Tk + 2 * nkb + 16) * kE;
  const double acc = 2 * (std::max(a.Tk, a.Tq * a.H / a.Hkv) + 1) * kE;
  Bounds bd{Bound(s.out_size()), Bound(s.lse_size()), Bound(in[0].size()), Bound(in[1].size())};
  for (int b = 0; b < a.B; b++)
    for (int h = 0; h < a.H; h++)
      for (int i = 0; i < a.Tq; i++) {
        const Row r = exact_row(s, in, dout, b, h, i);
        const int g = h / (a.H / a.Hkv);
        const double di = std::exp(2 * r.m) - 1 + 2 * sm;
        bd.lse[(size_t(b) * a.H + h) * a.Tq + i] = r.m + 2 * sm;
        const size_t qrow = (size_t(b) * a.Tq + i);
        const float* q = a.q + qrow * a.ldq + size_t(h) * hd;
        const float* gy = dout.data() + qrow * s.ldo() + size_t(h) * hd;
        for (size_t n = 0; n < r.keys.size(); n++) {
          const size_t krow = size_t(b) * a.Tk + r.keys[n];
          const float* k = a.k + krow * a.ldk + size_t(g) * hd;
          const float* v = a.v + krow * a.ldv + size_t(g) * hd;
          const double p = r.p[n], ds = scale * p * (r.dP[n] - r.D);
          const double eP = p * (std::exp(r.eS[n]) - 1 + 2 * (std::fabs(r.s[n] - r.lse) + 4) * kE);
          const double eDS = scale * (eP * (std::fabs(r.dP[n] - r.D) + r.e1[n]) + p * r.e1[n]) +
                             4 * kE * std::fabs(ds);
          const double cs = eDS * (1 + kU) * (1 + kU) + (r2 + acc) * std::fabs(ds);
          const double cv = eP * (1 + kU) * (1 + kU) + (r2 + acc) * p;
          for (int d = 0; d < hd; d++) {
            bd.out[qrow * s.ldo() + size_t(h) * hd + d] +=
                p * std::fabs(v[d]) * ((1 + di) * (1 + kU) * (1 + kU) - 1 + acc);
            bd.dq[qrow * s.ldq() + size_t(h) * hd + d] += cs * std::fabs(k[d]);
            bd.dkv[krow * s.ldkv() + size_t(g) * hd + d] += cs * std::fabs(q[d]);
            bd.dkv[krow * s.ldkv() + size_t(a.Hkv + g) * hd + d] += cv * std::fabs(gy[d]);
          }
        }
      }
  return bd;
}

class FlashAttentionBf16 : public ::testing::TestWithParam<FlashProblem> {};

// One bf16 path (the AMX tiles with amx true, else the AVX512-BF16 ones) against fp32: both
// multiply the same bf16 operands with fp32 sums, so the one bound covers them.
void within_the_bound(const FlashProblem& p32, bool amx) {
  FlashProblem p16 = p32;
  p16.precision = FlashPrecision::bf16, p16.amx = amx;
  const FlashSetup s32(p32), s16(p16);
  const Bufs in = s32.inputs(31);
  const Buf dout = random_normal(s32.out_size(), 32);
  const Result r32 = forward_fast(s32, in), r16 = forward_fast(s16, in);
  // Both backwards from fp32's out and lse: the bound is the backward's own.
  const Bufs g32 = backward_fast(s32, in, r32, dout), g16 = backward_fast(s16, in, r32, dout);
  const Bounds bd = bounds(s32, in, dout);
  const double wo = worst_ratio(r16.out, r32.out, bd.out),
               wl = worst_ratio(r16.lse, r32.lse, bd.lse);
  const double wq = worst_ratio(g16[0], g32[0], bd.dq), wkv = worst_ratio(g16[1], g32[1], bd.dkv);
  EXPECT_LE(wo, 1.0) << "out";
  EXPECT_LE(wl, 1.0) << "lse";
  EXPECT_LE(wq, 1.0) << "dq";
  EXPECT_LE(wkv, 1.0) << "dk, dv";
  ::testing::Test::RecordProperty("worst_ratio", std::to_string(std::max({wo, wl, wq, wkv})));
  std::printf("worst ratio to the bound: out %.3f lse %.3f dq %.3f dk,dv %.3f\n", wo, wl, wq, wkv);
  // Not fp32 in disguise: fp32 rounding alone stays near 1e-6 of the values.
  EXPECT_GT(normalised_error(r16.out, r32.out), 2e-4);
  EXPECT_GT(normalised_error(g16[0], g32[0]), 2e-4);
  EXPECT_GT(normalised_error(g16[1], g32[1]), 2e-4);
}

TEST_P(FlashAttentionBf16, WithinThePropagatedBoundOfFp32) {
  ASSERT_FALSE(GetParam().fused) << "the bounds index separate q and [k | v] buffers";
  FlashProblem p = GetParam();
  p.precision = FlashPrecision::bf16, p.amx = false;
  if (std::string(flash_attention_path(FlashSetup(p).args(FlashSetup(p).inputs(1)))) !=
      "avx512-bf16")
    GTEST_SKIP() << "no AVX512-BF16 kernels in this build / CPU";
  {
    SCOPED_TRACE("avx512-bf16");
    within_the_bound(GetParam(), false);
  }
  p.amx = true;
  if (std::string(flash_attention_path(FlashSetup(p).args(FlashSetup(p).inputs(1)))) ==
      "amx-bf16") {
    SCOPED_TRACE("amx-bf16");
    within_the_bound(GetParam(), true);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashAttentionBf16,
    ::testing::Values(
        problem("T100_gqa2_hd64", 1, 4, 2, 64, contiguous(100), contiguous(100), false, false),
        problem("T70_mqa_hd128", 2, 2, 1, 128, contiguous(70), contiguous(70), false, false),
        problem("T45_gqa8_hd32", 1, 8, 1, 32, contiguous(45), contiguous(45), false, false),
        problem("T33_hd16", 1, 2, 2, 16, contiguous(33), contiguous(33), false, false),
        problem("cp2_rank0_own_chunks", 1, 2, 1, 64, zigzag(256, 2, 0), zigzag(256, 2, 0), false,
                false),
        problem("cp4_step", 2, 4, 2, 64, zigzag(128, 4, 3), zigzag(128, 4, 1), false, false)),
    [](const ::testing::TestParamInfo<FlashProblem>& info) { return info.param.name; });

}  // namespace
}  // namespace mt::test
