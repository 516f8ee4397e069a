// The GPU softwares' kernels at their published rates (issue #30, the Megatron-Core H100
// rows): the fused attention core at the rate its software's kernel was published at
// (attention_fwd_of_peak / attention_bwd_of_peak), and nothing else moved by it.
#include <gtest/gtest.h>

#include "plan/cost_model.h"
#include "plan/hardware_costs.h"
#include "plan/software_profiles.h"
#include "plan/time_model.h"

namespace mt::plan {
namespace {

// The MC24 table's head shape (head width 128, sequence 4096) on h100-80gb.
PlanRequest h100_request(const std::string& software) {
  PlanRequest r;
  r.model.layers = 4;
  r.model.dim = 2048;
  r.model.heads = 16;
  r.model.seq = 4096;
  r.model.vocab = 32768;
  r.batch = 4;
  r.hardware = preset_profile("h100-80gb");
  apply_software(r.hardware, software);
  r.devices = 1;
  return r;
}

Layout one_gpu(Precision precision) {
  Layout l;
  l.micro_batch = 4;
  l.precision = precision;
  return l;
}

// Megatron-Core r0.8.0's attention is Transformer Engine's cuDNN backend on Hopper; its
// published causal rate at 4 x 16 heads x 4096 x 128 prices FlashAttention's count of the
// core (the causal half, backward 2.5x); without the figures (or under fp32) the core is the
// batched-GEMM model, which is slower at head width 128 (K = 128 at d/(d + 192)).
TEST(PlanPublishedKernels, FusedAttentionRunsAtItsSoftwaresPublishedRate) {
  PlanRequest r = h100_request("megatron-core-2024");
  const Layout l = one_gpu(Precision::bf16);
  EXPECT_NEAR(r.hardware.attention_fwd_of_peak * r.hardware.peak_bf16, 542.3e12, 1e9);
  EXPECT_NEAR(r.hardware.attention_bwd_of_peak * r.hardware.peak_bf16, 443.6e12, 1e9);
  const Passes cudnn = gemm_attention_core(make_context(r, l));
  const double s = 4096, causal = s / 2, heads = 4 * 16, width = 128;
  const double flops = 2 * s * causal * (width + width) * heads;
  const double overhead = r.hardware.kernel_overhead_s;
  EXPECT_NEAR(cudnn.forward, flops / 542.3e12 + overhead, 1e-9);
  EXPECT_NEAR(cudnn.backward, 2.5 * flops / 443.6e12 + overhead, 1e-9);
  EXPECT_EQ(cudnn.weight, 0);

  PlanRequest gemm = r;
  gemm.hardware.attention_fwd_of_peak = gemm.hardware.attention_bwd_of_peak = 0;
  const Passes model = gemm_attention_core(make_context(gemm, l));
  EXPECT_GT(model.forward, 1.5 * cudnn.forward);  // 297 TFLOP/s against 542
  EXPECT_DOUBLE_EQ(model.backward, 2.5 * model.forward);
  // The whole step moves by the layers' cores and nothing else.
  const double layers = r.model.layers;
  const StageCosts on = stage_costs(r, l)[0], off = stage_costs(gemm, l)[0];
  EXPECT_NEAR(off.forward - on.forward, layers * (model.forward - cudnn.forward), 1e-12);
  EXPECT_NEAR(off.backward - on.backward, layers * (model.backward - cudnn.backward), 1e-12);
  EXPECT_DOUBLE_EQ(off.weight, on.weight);
  // The figures are bf16 figures: an fp32 plan keeps the GEMM model.
  const Layout fp32 = one_gpu(Precision::fp32);
  EXPECT_DOUBLE_EQ(gemm_attention_core(make_context(r, fp32)).forward,
                   gemm_attention_core(make_context(gemm, fp32)).forward);
}

// Which softwares have a published kernel rate: Megatron-Core r0.8.0 (cuDNN via Transformer
// Engine) and MegaScale (FlashAttention-2 on A100, one forward + backward figure); the rest
// keep the GEMM model (their kernel or its rate is not stated).
TEST(PlanPublishedKernels, OnlySoftwaresWithAPublishedKernelRateHaveOne) {
  HardwareProfile ms = preset_profile("a100-80gb");
  apply_software(ms, "megascale-2024");
  EXPECT_NEAR(ms.attention_fwd_of_peak * ms.peak_bf16, 155e12, 1e9);
  EXPECT_EQ(ms.attention_fwd_of_peak, ms.attention_bwd_of_peak);
  for (const char* name : {"meshtrain", "megatron-lm-2021", "megatron-lm-2022", "llama3-2024",
                           "deepseek-v3-2024", "megatron-bridge-2025"}) {
    HardwareProfile h = preset_profile("h100-80gb");
    apply_software(h, name);
    EXPECT_EQ(h.attention_fwd_of_peak, 0) << name;
    EXPECT_EQ(h.attention_bwd_of_peak, 0) << name;
  }
}

}  // namespace
}  // namespace mt::plan
