// The bf16 experts' packed weights (model/expert_gemm.h, Bf16ExpertWeights::packed): on the
// AMX and AVX512-BF16 paths each layout is packed once per change of the weights (the model's
// version) and read by every forward, input gradient and part until the next change. Two steps of
// training, parts and all, are the same bits as the per-call packing's: a pack kept past
// an optimizer step (a stale pack) would run step 2 on step 1's weights.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/rng.h"
#include "kernels/grouped_gemm.h"
#include "model/expert_gemm.h"
#include "model/expert_mlp.h"
#include "model/swiglu_experts_harness.h"

namespace mt {
namespace {

constexpr int El = 4, kDim = 40, kHidden = 24;  // experts, their dim and hidden width
// Two parts' expert-major regions (as --moe-overlap-parts 2), expert 1 empty in the first.
const std::vector<int32_t> kPart0 = {0, 21, 21, 30, 52}, kPart1 = {52, 60, 77, 90, 117};
constexpr int kRows = 117;

std::vector<float> random_vec(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(0.5 * normal01(5, stream, i));
  return v;
}

bool same_bits(const std::vector<float>& a, const float* b) {
  return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

// SwiGLU experts in bf16 trained by plain SGD, the model's version bumped after each update
// (as train_step's GPT::weights_changed).
struct Training : test_util::SwigluExperts {
  std::vector<float> y, dx;  // the last step's

  Training()
      : SwigluExperts(El, kDim, kHidden, kRows, true, 0,
                      [](size_t n) { return random_vec(n, 3); }) {}

  // One step over both parts: forward and input gradient part by part, the weight
  // gradients over both at once, then the update.
  void step(uint64_t seed) {
    ++version;
    const ExpertGroups parts[2] = {{kPart0.data(), El}, {kPart1.data(), El}};
    std::vector<float> x = random_vec(size_t(kRows) * kDim, seed),
                       dy = random_vec(x.size(), seed + 1);
    y.assign(x.size(), 0), dx.assign(x.size(), 0);
    float* in = mlp->input_rows(slot.data(), x.data());
    std::copy(x.begin(), x.end(), in);
    for (const ExpertGroups& g : parts) mlp->forward(slot.data(), g, in, y.data());
    float* d = mlp->grad_rows(slot.data(), dy.data());
    std::copy(dy.begin(), dy.end(), d);
    for (const ExpertGroups& g : parts) mlp->backward_input(slot.data(), g, d, dx.data());
    std::fill(grads.data(), grads.data() + table.total(), 0.0f);
    mlp->backward_weight(slot.data(), parts, 2);
    for (size_t i = 0; i < table.total(); ++i) params.data()[i] -= 0.5f * grads.data()[i];
  }
};

// The paths that read packs, those this CPU has.
std::vector<GroupedGemmPath> packing_paths() {
  std::vector<GroupedGemmPath> paths;
  for (const GroupedGemmPath p : {GroupedGemmPath::amx, GroupedGemmPath::avx512_bf16})
    if (grouped_gemm_path_available(true, p)) paths.push_back(p);
  return paths;
}

// Two training steps on `forced` with packs read are the per-call packing's bits.
void two_steps_equal_the_per_call_packing(GroupedGemmPath forced) {
  const ScopedGroupedGemmPath path(true, forced);
  SCOPED_TRACE(grouped_gemm_isa(true));
  Training packed, unpacked;
  for (uint64_t s : {10, 20}) {
    SCOPED_TRACE("step of seed " + std::to_string(s));
    packed.step(s);
    {
      const ScopedGroupedGemmPacks off(false);
      unpacked.step(s);
    }
    EXPECT_TRUE(same_bits(unpacked.y, packed.y.data())) << "forward";
    EXPECT_TRUE(same_bits(unpacked.dx, packed.dx.data())) << "input gradient";
    const std::vector<float> g(unpacked.grads.data(),
                               unpacked.grads.data() + unpacked.table.total());
    EXPECT_TRUE(same_bits(g, packed.grads.data())) << "weight gradients";
  }
}

TEST(ExpertPacks, TwoTrainingStepsEqualThePerCallPacking) {
  if (packing_paths().empty()) GTEST_SKIP() << "no path reads packs on this CPU";
  for (const GroupedGemmPath forced : packing_paths()) two_steps_equal_the_per_call_packing(forced);
}

// Each layout is packed once per version of the weights, whatever the calls and parts; a
// new version (an optimizer step, a load) packs again at the next use.
TEST(ExpertPacks, EachLayoutIsPackedOncePerChangeOfTheWeights) {
  if (packing_paths().empty()) GTEST_SKIP() << "no path reads packs on this CPU";
  const ScopedGroupedGemmPath path(true, packing_paths().back());
  uint64_t version = 1;
  std::vector<float> w = random_vec(size_t(El) * kHidden * kDim, 1);
  std::vector<Linear> lin(El);
  for (int le = 0; le < El; ++le) lin[le].in = kDim, lin[le].out = kHidden;
  for (int le = 0; le < El; ++le) lin[le].w = w.data() + size_t(le) * kHidden * kDim;
  Bf16ExpertWeights w16(lin, &version);
  std::vector<bf16> x(size_t(kRows) * kDim), dy(size_t(kRows) * kHidden);
  std::vector<float> y(size_t(kRows) * kHidden), dx(size_t(kRows) * kDim);
  auto pass = [&] {
    for (const std::vector<int32_t>* part : {&kPart0, &kPart1}) {
      const ExpertGroups g{part->data(), El};
      expert_gemm_forward(y.data(), x.data(), lin, w16, g, false);
      expert_gemm_backward_input(dx.data(), dy.data(), lin, w16, g, false);
    }
  };
  pass(), pass();  // a recomputation reads the same packs
  EXPECT_EQ(w16.packs(), 2);
  ++version;
  pass();
  EXPECT_EQ(w16.packs(), 4);
  {
    const ScopedGroupedGemmPacks off(false);  // the per-call packing: no packs made
    ++version;
    pass();
    EXPECT_EQ(w16.packs(), 4);
  }
}

}  // namespace
}  // namespace mt
