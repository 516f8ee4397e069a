// The GEMM formula's penalty for few rows (M, a microbatch's tokens) is its own measured
// figure (gemm_half_rows, kernel_probes.cpp's 128-row GEMM), not the K = 64 GEMM's
// half-rate dimension carried over to a different shortfall; both shares apply at once.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "kernels/matmul_bf16.h"
#include "plan/calibration_probes.h"
#include "plan/hardware_costs.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

// Compute-bound (memory far faster than the GEMMs) and no step factor: the formula alone.
HardwareProfile rows_profile() {
  HardwareProfile h = testing::synthetic_local();
  h.memory_bw = 1e15;
  h.gemm_half_dim = 200, h.gemm_half_rows = 10;
  h.gemm_half_dim_bf16 = 300, h.gemm_half_rows_bf16 = 20;
  return h;
}

double compute_s(double M, double N, double K, double peak, double slowdown) {
  return 2 * M * N * K / peak * slowdown;
}

TEST(PlanGemmRows, FewRowsPayTheRowPenaltyAndAShortReductionTheDimPenalty) {
  const HardwareProfile h = rows_profile();
  for (const bool bf16 : {false, true}) {
    const ComputeRates R = compute_rates(h, bf16 ? Precision::bf16 : Precision::fp32, 1, 1);
    const double peak = bf16 ? h.peak_bf16 : h.peak_fp32, over = R.gemm_overhead_s;
    const double rows_half = bf16 ? 20 : 10, dim_half = bf16 ? 300 : 200;
    // 128 rows by a 256 -> 1024 weight: the row share over 128, the dim share over 256.
    EXPECT_NEAR(local_gemm_seconds(R, 128, 1024, 256),
                compute_s(128, 1024, 256, peak, 1 + rows_half / 128 + dim_half / 256) + over, 1e-12)
        << bf16;
    // The weight gradient over the same 128 rows reduces over them (K): the dim share there.
    EXPECT_NEAR(local_gemm_seconds(R, 1024, 256, 128),
                compute_s(1024, 256, 128, peak, 1 + rows_half / 1024 + dim_half / 128) + over,
                1e-12)
        << bf16;
  }
}

// Stop 39: a bf16 GEMM of 256 rows by a 256-input weight (a 2-sequence microbatch) was
// priced with the row penalty alone (98% of the peak at these figures) and one of 257 rows
// with the dim penalty alone (54%), so every bf16 layout in 2-sequence microbatches read
// 19-29% fast. The rate may not jump where the rows pass the reduction.
TEST(PlanGemmRows, TheRateDoesNotJumpWhereTheRowsPassTheReduction) {
  HardwareProfile h = rows_profile();
  h.gemm_half_dim_bf16 = 221.6, h.gemm_half_rows_bf16 = 6.3;
  for (const bool bf16 : {false, true}) {
    const ComputeRates R = compute_rates(h, bf16 ? Precision::bf16 : Precision::fp32, 1, 1);
    const double per_row_256 = (local_gemm_seconds(R, 256, 768, 256) - R.gemm_overhead_s) / 256;
    const double per_row_257 = (local_gemm_seconds(R, 257, 768, 256) - R.gemm_overhead_s) / 257;
    EXPECT_NEAR(per_row_256 / per_row_257, 1.0, 0.01) << bf16;
  }
}

// The two figures the probes store give back both probes' measured rates at their shapes.
TEST(PlanGemmRows, BothProbeShapesArePricedAtTheirMeasuredRates) {
  HardwareProfile h = rows_profile();
  h.kernel_overhead_s = 0;
  const double W = kProbeWideDim, S = kProbeShortK, Rows = kProbeFewRows;
  for (const auto& [short_k, few_rows] : {std::pair{0.3, 0.8}, std::pair{0.8, 0.6}}) {
    const GemmHalves g =
        gemm_halves_from_probes(h.peak_fp32, short_k * h.peak_fp32, few_rows * h.peak_fp32);
    h.gemm_half_dim = g.dim, h.gemm_half_rows = g.rows;
    const ComputeRates R = compute_rates(h, Precision::fp32, 1, 1);
    EXPECT_NEAR(local_gemm_seconds(R, W, W, S), 2 * W * W * S / (short_k * h.peak_fp32), 1e-12);
    EXPECT_NEAR(local_gemm_seconds(R, Rows, W, W), 2 * Rows * W * W / (few_rows * h.peak_fp32),
                1e-12);
  }
  // Faster than the peak: no penalty (the row figure's floor keeps it "measured").
  const GemmHalves none = gemm_halves_from_probes(1e9, 2e9, 2e9);
  EXPECT_DOUBLE_EQ(none.dim, 0.0);
  EXPECT_DOUBLE_EQ(none.rows, kNoRowPenalty);
}

TEST(PlanGemmRows, AProfileWithoutTheRowFigureKeepsTheDimPenalty) {
  HardwareProfile h = rows_profile();
  h.gemm_half_rows = h.gemm_half_rows_bf16 = 0;
  for (const bool bf16 : {false, true}) {
    const ComputeRates R = compute_rates(h, bf16 ? Precision::bf16 : Precision::fp32, 1, 1);
    const double peak = bf16 ? h.peak_bf16 : h.peak_fp32;
    EXPECT_NEAR(local_gemm_seconds(R, 128, 1024, 256),
                compute_s(128, 1024, 256, peak, 1 + (bf16 ? 300 : 200) / 128.0) + R.gemm_overhead_s,
                1e-12);
  }
}

// The probes run the engine's GEMM paths and store a measured (non-zero) finite figure.
TEST(PlanGemmRows, TheProbesStoreAMeasuredFigure) {
  HardwareProfile h = rows_profile();
  h.gemm_half_rows = h.gemm_half_rows_bf16 = 0;
  std::ostringstream log;
  measure_gemm_halves(h, ProbeRun{0.02, 1, log});
  EXPECT_TRUE(std::isfinite(h.gemm_half_rows) && std::isfinite(h.gemm_half_dim));
  EXPECT_GT(h.gemm_half_rows, 0);
  if (!bf16_matmul_supported()) return;
  measure_bf16_halves(h, ProbeRun{0.02, 1, log});
  EXPECT_TRUE(std::isfinite(h.gemm_half_rows_bf16) && std::isfinite(h.gemm_half_dim_bf16));
  EXPECT_GT(h.gemm_half_rows_bf16, 0);
}

}  // namespace
}  // namespace mt::plan
