// The row share below the 128-row probe (gemm_few_rows, plan/few_rows_probe.cpp): a step's
// linears at 32 rows (cp 4 of a 128-token sequence) pay more per FLOP than gemm_half_rows / M
// prices (stop 46: 2.2-2.8x the 1024-row rate where the 128-row figure alone gives 1.4x).
// Each figure holds where it was measured, a line in log2 M between; a profile without it
// keeps gemm_half_rows at every M.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "plan/calibration_probes.h"
#include "plan/hardware_costs.h"
#include "plan/profile_fields.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

// Compute-bound (memory far faster than the GEMMs), no step factor, no per-call overhead:
// the formula's share alone, the same per FLOP for every shape of one min(N, K) (the probe's
// four shapes all have 256).
HardwareProfile few_rows_profile(double few, double few_bf16) {
  HardwareProfile h = testing::synthetic_local();
  h.memory_bw = 1e15;
  h.kernel_overhead_s = h.bf16_overhead_s = 0;
  h.gemm_half_dim = 200, h.gemm_half_rows = 10, h.gemm_few_rows = few;
  h.gemm_half_dim_bf16 = 300, h.gemm_half_rows_bf16 = 20, h.gemm_few_rows_bf16 = few_bf16;
  return h;
}

TEST(PlanFewRows, EachRowFigureHoldsWhereItWasMeasured) {
  for (const double M : {8.0, 32.0, 64.0, 128.0, 1024.0}) EXPECT_EQ(gemm_rows_share(10, 0, M), 10);
  EXPECT_EQ(gemm_rows_share(10, 40, 16), 40);
  EXPECT_EQ(gemm_rows_share(10, 40, kProbeStepRows), 40);
  EXPECT_DOUBLE_EQ(gemm_rows_share(10, 40, 64), 25);  // halfway in log2 from 32 to 128
  EXPECT_EQ(gemm_rows_share(10, 40, kProbeFewRows), 10);
  EXPECT_EQ(gemm_rows_share(10, 40, 1024), 10);
}

TEST(PlanFewRows, ThirtyTwoRowsPayTheStepRowsShareOnTheirPath) {
  const HardwareProfile h = few_rows_profile(40, 60), old = few_rows_profile(0, 0);
  for (const bool bf16 : {false, true}) {
    const Precision p = bf16 ? Precision::bf16 : Precision::fp32;
    const ComputeRates R = compute_rates(h, p, 1, 1), R0 = compute_rates(old, p, 1, 1);
    const double peak = bf16 ? h.peak_bf16 : h.peak_fp32, over = R.gemm_overhead_s;
    const double few = bf16 ? 60 : 40, dim = bf16 ? 300 : 200, half = bf16 ? 20 : 10;
    const double flops = 2.0 * 32 * 512 * 256;
    EXPECT_NEAR(local_gemm_seconds(R, 32, 512, 256),
                flops / peak * (1 + few / 32 + dim / 256) + over, 1e-12)
        << bf16;
    // Without the figure: the 128-row figure, as before stop 46.
    EXPECT_NEAR(local_gemm_seconds(R0, 32, 512, 256),
                flops / peak * (1 + half / 32 + dim / 256) + over, 1e-12)
        << bf16;
    // From 128 rows on the figure changes nothing.
    for (const double M : {128.0, 256.0, 1024.0})
      EXPECT_EQ(local_gemm_seconds(R, M, 512, 256), local_gemm_seconds(R0, M, 512, 256)) << M;
  }
}

TEST(PlanFewRows, TheProbesFigurePricesItsMeasuredRatio) {
  const ComputeRates R = compute_rates(few_rows_profile(0, 0), Precision::fp32, 1, 1);
  const auto priced_ratio = [&](double few) {
    ComputeRates r = R;
    r.gemm_few_rows = few;
    const double at = [&](double M) {
      return local_gemm_seconds(r, M, 512, 256) / (2 * M * 512 * 256);
    }(kProbeStepRows);
    return at / (local_gemm_seconds(r, kProbeStepRowsRef, 512, 256) /
                 (2 * kProbeStepRowsRef * 512 * 256));
  };
  for (const double ratio : {1.6, 2.4, 3.0}) {
    const double few = few_rows_for_ratio(R, ratio);
    EXPECT_GT(few, 10) << ratio;  // above the 128-row figure: the measured knee
    EXPECT_NEAR(priced_ratio(few) / ratio, 1.0, 0.01) << ratio;
  }
  // A ratio the formula cannot price that low: no row share at all.
  EXPECT_EQ(few_rows_for_ratio(R, 0.5), kNoRowPenalty);
}

TEST(PlanFewRows, TheProfileFieldsAreFiniteAndOptional) {
  const std::string base =
      "[hardware]\nname = \"x\"\nlocal = true\nmemory_bytes = 8e10\npeak_fp32 = 1e11\n"
      "memory_bw = 1e10\nintra_busbw = 1e10\np2p_bw_intra = 1e10\n";
  const HardwareProfile old = parse_profile_toml(base, "old.toml");
  EXPECT_EQ(old.gemm_few_rows, 0);
  EXPECT_EQ(old.gemm_few_rows_bf16, 0);
  const HardwareProfile h =
      parse_profile_toml(base + "gemm_few_rows = 43.5\ngemm_few_rows_bf16 = 64.5\n", "new.toml");
  EXPECT_EQ(h.gemm_few_rows, 43.5);
  EXPECT_EQ(h.gemm_few_rows_bf16, 64.5);
  for (const std::string bad :
       {"gemm_few_rows = nan", "gemm_few_rows = inf", "gemm_few_rows_bf16 = nan",
        "gemm_few_rows_bf16 = -inf", "gemm_few_rows = -1"})
    EXPECT_THROW(parse_profile_toml(base + bad + "\n", "bad.toml"), UsageError) << bad;
}

}  // namespace
}  // namespace mt::plan
