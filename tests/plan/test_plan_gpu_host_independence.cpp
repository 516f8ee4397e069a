// A GPU plan's memory does not depend on the CPU that runs the planner (model/kernel_target.h):
// the engine's estimate, asked for a GPU preset, counts the attention core as a fused GPU
// kernel keeps it and no CPU kernel's scratch. Each test moves one thing the host decides
// (the attention kernel a head dim dispatches to, the OpenMP team, the linears' weight-gradient
// orientation), checks that it does move this host's estimate (the lever is live), and that
// the GPU plan's figures stay where they were.
#include <gtest/gtest.h>
#include <omp.h>

#include "kernels/matmul_weight_grad.h"
#include "plan/hardware_profile.h"
#include "plan/layout.h"
#include "plan/memory_model.h"
#include "plan_test_util.h"
#include "schedule/schedule.h"
#include "train/memory_estimate.h"

namespace mt::plan {
namespace {

PlanRequest gpu_request(int layers, int dim, int heads, int seq) {
  PlanRequest r;
  r.model.layers = layers;
  r.model.dim = dim;
  r.model.heads = heads;
  r.model.seq = seq;
  r.model.vocab = 50304;
  r.batch = 8;
  r.hardware = preset_profile("h100-80gb");  // software meshtrain: the engine's estimate
  r.devices = 8;
  return r;
}

Layout gpu_layout(Precision precision) {
  Layout l;
  l.dp = 8, l.micro_batch = 1, l.precision = precision;
  return l;
}

int64_t host_estimate(const PlanRequest& r, const Layout& l) {
  return estimate_rank_memory(train_options(r, l), Schedule{}, KernelTarget::this_host).total();
}

// Head dim 80 has no register-tile attention kernel on a CPU (kernels/attention.h): this host
// would keep the (b, heads, T, T) probabilities and a (T, T) gradient scratch per head. A GPU
// plan keeps what a fused kernel keeps whatever the head dim: 10 heads of 64 and 8 heads of
// 80 at the same width differ by the two heads' log-sum-exp rows only (one fp32 per token in
// each layer's slot) and their D rows in the backward's shared workspace.
TEST(PlanGpuHostIndependence, AttentionKeepsTheFusedKernelsRowsWhateverTheHeadDim) {
  const int layers = 4, dim = 640, seq = 1024;
  const PlanRequest r64 = gpu_request(layers, dim, 10, seq), r80 = gpu_request(layers, dim, 8, seq);
  const Layout l = gpu_layout(Precision::fp32);
  // The lever: on this host the head dim picks the kernel and its saved form.
  EXPECT_GT(host_estimate(r80, l), host_estimate(r64, l) + int64_t(8) * seq * seq * 4);
  const PlannedMemory m64 = planned_memory(r64, l, Schedule{});
  const PlannedMemory m80 = planned_memory(r80, l, Schedule{});
  const int64_t rows = int64_t(10 - 8) * seq * 4;  // b = 1, fp32
  EXPECT_EQ(m64.params, m80.params);
  EXPECT_EQ(m64.grads, m80.grads);
  EXPECT_EQ(m64.optimizer, m80.optimizer);
  EXPECT_EQ(m64.activations - m80.activations, layers * rows);
  EXPECT_EQ(m64.buffers - m80.buffers, rows);
}

// The flash kernels' workspaces on a CPU are sized per thread of the planner's OpenMP team
// (kernels/flash_attention.h): a Llama GPU plan must not grow with the cores of the machine
// that computes it.
TEST(PlanGpuHostIndependence, LlamaPlanDoesNotFollowThePlannersOpenMpTeam) {
  PlanRequest r = gpu_request(4, 512, 8, 1024);
  r.model.arch = Arch::llama;
  const int saved = omp_get_max_threads();
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    const Layout l = gpu_layout(p);
    omp_set_num_threads(1);
    const int64_t host1 = host_estimate(r, l);
    const PlannedMemory one = planned_memory(r, l, Schedule{});
    omp_set_num_threads(8);
    const int64_t host8 = host_estimate(r, l);
    const PlannedMemory eight = planned_memory(r, l, Schedule{});
    EXPECT_NE(host1, host8);  // the lever
    testing::expect_same_memory(one, eight, p == Precision::bf16 ? "bf16" : "fp32");
  }
  omp_set_num_threads(saved);
}

// The fp32 linears' transposed weight gradient keeps a (C, OC) copy per thread on a CPU
// (kernels/matmul_weight_grad.h) where the shape rule takes it (the MLP's fc at width 256):
// not a GPU's.
TEST(PlanGpuHostIndependence, GptPlanDoesNotCountTheCpuLinearsWeightGradientScratch) {
  const PlanRequest r = gpu_request(4, 256, 4, 1024);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    const Layout l = gpu_layout(p);
    const int64_t host_by_shape = host_estimate(r, l);
    const PlannedMemory by_shape = planned_memory(r, l, Schedule{});
    ScopedFp32WeightGradPath plain(Fp32WeightGradPath::plain);
    EXPECT_EQ(host_by_shape - host_estimate(r, l), int64_t(256) * 1024 * 4);  // the lever
    testing::expect_same_memory(by_shape, planned_memory(r, l, Schedule{}),
                                p == Precision::bf16 ? "bf16" : "fp32");
  }
}

}  // namespace
}  // namespace mt::plan
