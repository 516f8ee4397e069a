// The experts' GEMMs are the grouped GEMMs of kernels/grouped_gemm.h, one call over every
// local expert (model/expert_gemm.h), not one GEMM per expert: the SwiGLU experts' forward,
// input gradient and weight gradients equal, bit for bit, the grouped kernels' products
// around the SwiGLU, computed here from the same weights and rows, in fp32 and bf16. The
// groups are uneven, one of them empty. (A loop of oneDNN GEMMs sums in other orders: its
// bits differ.)
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/bf16.h"
#include "kernels/grouped_gemm.h"
#include "kernels/matmul_bf16.h"
#include "kernels/swiglu.h"
#include "model/expert_mlp.h"
#include "model/swiglu_experts_harness.h"

namespace mt {
namespace {

constexpr int El = 4;
const std::vector<int32_t> kOffset = {0, 37, 37, 45, 109};  // expert 1 gets no rows

std::vector<float> random_vec(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(0.5 * normal01(3, stream, i));
  return v;
}

std::vector<bf16> rounded(const float* x, size_t n) {
  std::vector<bf16> out(n);
  to_bf16(out.data(), x, n);
  return out;
}

// The experts of one layer, their parameters random, run once forward and backward.
struct Experts : test_util::SwigluExperts {
  int R = kOffset.back();
  std::vector<float> x, dy, y, dx;

  Experts(bool bf16, int c, int h)
      : SwigluExperts(El, c, h, kOffset.back(), bf16, 1,
                      [](size_t n) { return random_vec(n, 3); }) {
    x = random_vec(size_t(R) * C, 1), dy = random_vec(size_t(R) * C, 2);
    y.assign(x.size(), 0), dx = y;
    const ExpertGroups g{kOffset.data(), El};
    float* in = mlp->input_rows(slot.data(), x.data());
    std::copy(x.begin(), x.end(), in);
    mlp->forward(slot.data(), g, in, y.data());
    float* d = mlp->grad_rows(slot.data(), dy.data());
    std::copy(dy.begin(), dy.end(), d);
    mlp->backward_input(slot.data(), g, d, dx.data());
    mlp->backward_weight(slot.data(), g);
  }
};

// The grouped kernels' products around the SwiGLU, fp32 or (T = bf16) bf16 operands.
struct Reference {
  std::vector<float> y, dx, dgu, dw_gu, dw_down;
};

Reference fp32_reference(Experts& e) {
  const int R = e.R;
  std::vector<const float*> gu_w, down_w;
  std::vector<float*> gu_dw, down_dw;
  Reference r;
  r.dw_gu.assign(size_t(El) * 2 * e.H * e.C, 0), r.dw_down.assign(size_t(El) * e.C * e.H, 0);
  for (int le = 0; le < El; ++le) {
    gu_w.push_back(e.at("gate_proj.weight", le, false));
    down_w.push_back(e.at("down_proj.weight", le, false));
    gu_dw.push_back(r.dw_gu.data() + size_t(le) * 2 * e.H * e.C);
    down_dw.push_back(r.dw_down.data() + size_t(le) * e.C * e.H);
  }
  std::vector<float> gu(size_t(R) * 2 * e.H), h(size_t(R) * e.H), dh(h.size());
  r.y.resize(size_t(R) * e.C), r.dx.resize(r.y.size()), r.dgu.resize(gu.size());
  const int32_t* off = kOffset.data();
  grouped_matmul_forward(gu.data(), e.x.data(), gu_w.data(), off, El, e.C, 2 * e.H);
  swiglu_forward(h.data(), gu.data(), R, e.H);
  grouped_matmul_forward(r.y.data(), h.data(), down_w.data(), off, El, e.H, e.C);
  grouped_matmul_backward_input(dh.data(), e.dy.data(), down_w.data(), off, El, e.H, e.C, false);
  swiglu_backward(r.dgu.data(), gu.data(), dh.data(), R, e.H, false);
  grouped_matmul_backward_input(r.dx.data(), r.dgu.data(), gu_w.data(), off, El, e.C, 2 * e.H,
                                false);
  grouped_matmul_backward_weight(down_dw.data(), e.dy.data(), h.data(), off, El, e.H, e.C);
  grouped_matmul_backward_weight(gu_dw.data(), r.dgu.data(), e.x.data(), off, El, e.C, 2 * e.H);
  return r;
}

Reference bf16_reference(Experts& e) {
  const int R = e.R;
  std::vector<std::vector<bf16>> gu16, down16;
  std::vector<const bf16*> gu_w, down_w;
  std::vector<float*> gu_dw, down_dw;
  Reference r;
  r.dw_gu.assign(size_t(El) * 2 * e.H * e.C, 0), r.dw_down.assign(size_t(El) * e.C * e.H, 0);
  for (int le = 0; le < El; ++le) {
    gu16.push_back(rounded(e.at("gate_proj.weight", le, false), size_t(2) * e.H * e.C));
    down16.push_back(rounded(e.at("down_proj.weight", le, false), size_t(e.C) * e.H));
    gu_w.push_back(gu16.back().data()), down_w.push_back(down16.back().data());
    gu_dw.push_back(r.dw_gu.data() + size_t(le) * 2 * e.H * e.C);
    down_dw.push_back(r.dw_down.data() + size_t(le) * e.C * e.H);
  }
  const std::vector<bf16> x = rounded(e.x.data(), e.x.size()),
                          dy = rounded(e.dy.data(), e.dy.size());
  std::vector<float> gu(size_t(R) * 2 * e.H), dh(size_t(R) * e.H);
  std::vector<bf16> h(dh.size()), dgu(gu.size());
  r.y.resize(size_t(R) * e.C), r.dx.resize(r.y.size());
  const int32_t* off = kOffset.data();
  grouped_matmul_bf16_forward(gu.data(), x.data(), gu_w.data(), off, El, e.C, 2 * e.H);
  swiglu_forward_bf16(h.data(), gu.data(), R, e.H);
  grouped_matmul_bf16_forward(r.y.data(), h.data(), down_w.data(), off, El, e.H, e.C);
  grouped_matmul_bf16_backward_input(dh.data(), dy.data(), down_w.data(), off, El, e.H, e.C, false);
  swiglu_backward_bf16(dgu.data(), gu.data(), dh.data(), R, e.H);
  grouped_matmul_bf16_backward_input(r.dx.data(), dgu.data(), gu_w.data(), off, El, e.C, 2 * e.H,
                                     false);
  grouped_matmul_bf16_backward_weight(down_dw.data(), dy.data(), h.data(), off, El, e.H, e.C);
  grouped_matmul_bf16_backward_weight(gu_dw.data(), dgu.data(), x.data(), off, El, e.C, 2 * e.H);
  return r;
}

// C, H: H <= C runs bf16's d_act through dx's rows; H > C through the stage, in pieces of 64
// rows (max_tokens = 109), one boundary inside expert 3's rows.
void expect_grouped(bool bf16, int C, int H) {
  SCOPED_TRACE("C " + std::to_string(C) + " H " + std::to_string(H));
  const int saved = compute_threads();
  set_compute_threads(1);
  Experts e(bf16, C, H);
  const Reference r = bf16 ? bf16_reference(e) : fp32_reference(e);
  set_compute_threads(saved);
  EXPECT_EQ(e.y, r.y);
  EXPECT_EQ(e.dx, r.dx);
  for (int le = 0; le < El; ++le) {
    SCOPED_TRACE("expert " + std::to_string(le));
    const float* gu = e.at("gate_proj.weight", le, true);
    const float* down = e.at("down_proj.weight", le, true);
    const size_t ngu = size_t(2) * H * C, ndown = size_t(C) * H;
    EXPECT_TRUE(std::equal(gu, gu + ngu, r.dw_gu.data() + le * ngu));
    EXPECT_TRUE(std::equal(down, down + ndown, r.dw_down.data() + le * ndown));
  }
}

TEST(GroupedExperts, Fp32SwigluExpertsAreTheGroupedKernels) {
  expect_grouped(false, 32, 16);
  expect_grouped(false, 16, 24);
}

TEST(GroupedExperts, Bf16SwigluExpertsAreTheGroupedKernels) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU (needs AVX-512)";
  expect_grouped(true, 32, 16);
  expect_grouped(true, 16, 24);
}

// The arenas the experts hold outside the slot are what the memory estimate's dry run adds
// as their workspace (model/dry_model.h): the fp32 SwiGLU experts' d_act (R, H) was held
// but not counted. The bf16 experts route d_act through the chunk's stage instead.
TEST(GroupedExperts, Fp32SwigluExpertsCountTheirGradientRowsAsWorkspace) {
  const Experts fp32(false, 16, 24);
  EXPECT_EQ(fp32.mlp->own_workspace_floats(), size_t(fp32.R) * 24);
}

}  // namespace
}  // namespace mt
