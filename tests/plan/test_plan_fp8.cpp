// FP8 GEMMs on GPU presets (software field fp8_gemms, hardware field peak_fp8): the linear
// layers' GEMMs run at the FP8 peak and pay their operands' cast-transposes, the rest of the
// block stays at bf16, and software that needs FP8 on hardware without it is refused.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/cost_model.h"
#include "plan/hardware_costs.h"
#include "plan/software_profiles.h"

namespace mt::plan {
namespace {

PlanRequest llama_request(const std::string& hardware, const std::string& software) {
  PlanRequest r;
  r.model.arch = Arch::llama;
  r.model.layers = 4;
  r.model.dim = 4096;
  r.model.heads = 32;
  r.model.ffn_dim = 14336;
  r.model.seq = 4096;
  r.model.vocab = 32000;
  r.batch = 16;
  r.hardware = preset_profile(hardware);
  apply_software(r.hardware, software);
  r.devices = 8;
  return r;
}

Layout one_rank(Precision precision) {
  Layout l;
  l.dp = 1, l.tp = 1, l.pp = 1, l.micro_batch = 1;
  l.schedule = "1f1b", l.precision = precision;
  return l;
}

TEST(PlanFp8, PresetsCarryTheDatasheetFp8Peak) {
  EXPECT_EQ(preset_profile("h100-80gb").peak_fp8, 1979e12);
  EXPECT_EQ(preset_profile("h800-80gb").peak_fp8, 1979e12);
  EXPECT_EQ(preset_profile("a100-80gb").peak_fp8, 0);  // no FP8 tensor cores
  HardwareProfile h = preset_profile("h100-80gb");
  EXPECT_FALSE(h.fp8_gemms);  // meshtrain: bf16 GEMMs at most
  apply_software(h, "deepseek-v3-2024");
  EXPECT_TRUE(h.fp8_gemms);
  // --explain says how MLA is planned: --attention mla, else as MHA.
  bool mla = false;
  for (const std::string& line : software_lines(h))
    mla = mla || line.find("MLA with --attention mla (else planned as MHA") != std::string::npos;
  EXPECT_TRUE(mla);
  EXPECT_EQ(h.max_zero, 1);
  EXPECT_TRUE(h.fb_a2a_overlap);
  EXPECT_EQ(h.schedules, std::vector<std::string>{"dualpipev"});
  // Megatron-Bridge's DGX-H100 DeepSeek-V3 recipe: FP8, no gradient-reduce overlap, bf16
  // gradient reduction, no all-to-all overlap.
  apply_software(h, "megatron-bridge-2025");
  EXPECT_TRUE(h.fp8_gemms);
  EXPECT_EQ(h.dp_overlap, 0);
  EXPECT_EQ(h.grad_reduce_bytes, 2);
  EXPECT_EQ(h.a2a_overlap_parts, 1);
  EXPECT_FALSE(h.fb_a2a_overlap);
}

TEST(PlanFp8, WeightGemmsRunAtTheFp8PeakAndPayTheirCasts) {
  const PlanRequest r = llama_request("h100-80gb", "deepseek-v3-2024");
  const Layout l = one_rank(Precision::bf16);
  const CostContext c = make_context(r, l);
  ASSERT_TRUE(c.fp8);
  EXPECT_EQ(c.rates8.peak, 1979e12);
  const double M = 8192, N = 8192, K = 8192;
  const double fp8 = gemm_seconds(c.rates8, M, N, K, 1);
  const double casts = stream_seconds(c.rates8, (M * K + K * N) * 4, 2);
  EXPECT_DOUBLE_EQ(weight_gemm(c, c.rates, M, N, K), fp8 + casts);
  EXPECT_DOUBLE_EQ(weight_gemm(c, c.rates, M, N, K, 1, false), fp8);  // wgrad: no casts
  // At this shape the GEMM is compute-bound: the bf16 time at the ratio of the peaks (one
  // kernel overhead each).
  const double bf16 = linear_gemm(c, c.rates, M, N, K), launch = c.rates.overhead_s;
  EXPECT_NEAR(fp8 - launch, (bf16 - launch) * 989e12 / 1979e12, bf16 * 1e-9);
  // fp32 plans and the bf16 software keep the 16-bit GEMM.
  const CostContext c32 = make_context(r, one_rank(Precision::fp32));
  EXPECT_FALSE(c32.fp8);
  EXPECT_DOUBLE_EQ(weight_gemm(c32, c32.rates, M, N, K), linear_gemm(c32, c32.rates, M, N, K));
  const PlanRequest m = llama_request("h100-80gb", "meshtrain");
  const CostContext cm = make_context(m, l);
  EXPECT_FALSE(cm.fp8);
  EXPECT_DOUBLE_EQ(weight_gemm(cm, cm.rates, M, N, K), bf16);
}

TEST(PlanFp8, OnlyTheLinearLayersChange) {
  const PlanRequest r8 = llama_request("h100-80gb", "deepseek-v3-2024");
  PlanRequest r16 = r8;
  r16.hardware.fp8_gemms = false;
  const Layout l = one_rank(Precision::bf16);
  const CostContext c8 = make_context(r8, l), c16 = make_context(r16, l);
  const BlockCosts fp8 = c8.model->block(c8, 0, 0), bf16 = c16.model->block(c16, 0, 0);
  // The projections and the MLP dominate this block: FP8 saves close to half of them, the
  // attention core, norms and SwiGLU stay as they were.
  EXPECT_LT(fp8.passes.forward, 0.8 * bf16.passes.forward);
  EXPECT_GT(fp8.passes.forward, 0.45 * bf16.passes.forward);
  EXPECT_LT(fp8.passes.weight, 0.55 * bf16.passes.weight);
  EXPECT_DOUBLE_EQ(gemm_attention_core(c8).forward, gemm_attention_core(c16).forward);
  EXPECT_DOUBLE_EQ(norms_and_residuals(c8).forward, norms_and_residuals(c16).forward);
}

TEST(PlanFp8, SoftwareWithFp8OnHardwareWithoutItIsRefused) {
  const PlanRequest r = llama_request("a100-80gb", "deepseek-v3-2024");
  Layout l = one_rank(Precision::bf16);
  l.schedule = "dualpipev", l.pp = 2, l.virtual_stages = 2, l.dp = 4;
  try {
    validate_candidate(r, l);
    FAIL() << "expected a refusal";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("has no FP8 rate (peak_fp8)"), std::string::npos)
        << e.what();
  }
  // FP8 applies to bf16 plans: an fp32 plan of the same software keeps its GEMMs.
  l.precision = Precision::fp32;
  EXPECT_NO_THROW(validate_candidate(r, l));
}

}  // namespace
}  // namespace mt::plan
