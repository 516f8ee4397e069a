// The GEMM formula's penalty for few rows (M, a microbatch's tokens) is its own measured
// figure (gemm_half_rows, kernel_probes.cpp's 128-row GEMM), not the K = 64 GEMM's
// half-rate dimension carried over to a different shortfall.
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

double compute_s(double M, double N, double K, double peak, double d, double half) {
  return 2 * M * N * K / (peak * d / (d + half));
}

TEST(PlanGemmRows, FewRowsPayTheRowPenaltyAndAShortReductionTheDimPenalty) {
  const HardwareProfile h = rows_profile();
  for (const bool bf16 : {false, true}) {
    const ComputeRates R = compute_rates(h, bf16 ? Precision::bf16 : Precision::fp32, 1, 1);
    const double peak = bf16 ? h.peak_bf16 : h.peak_fp32, over = R.gemm_overhead_s;
    const double rows_half = bf16 ? 20 : 10, dim_half = bf16 ? 300 : 200;
    // 128 rows by a 256 -> 1024 weight: the rows are the smallest dimension.
    EXPECT_NEAR(local_gemm_seconds(R, 128, 1024, 256),
                compute_s(128, 1024, 256, peak, 128, rows_half) + over, 1e-12)
        << bf16;
    // The weight gradient over the same 128 rows reduces over them (K): the dim penalty.
    EXPECT_NEAR(local_gemm_seconds(R, 1024, 256, 128),
                compute_s(1024, 256, 128, peak, 128, dim_half) + over, 1e-12)
        << bf16;
  }
}

TEST(PlanGemmRows, AProfileWithoutTheRowFigureKeepsTheDimPenalty) {
  HardwareProfile h = rows_profile();
  h.gemm_half_rows = h.gemm_half_rows_bf16 = 0;
  for (const bool bf16 : {false, true}) {
    const ComputeRates R = compute_rates(h, bf16 ? Precision::bf16 : Precision::fp32, 1, 1);
    const double peak = bf16 ? h.peak_bf16 : h.peak_fp32;
    EXPECT_NEAR(local_gemm_seconds(R, 128, 1024, 256),
                compute_s(128, 1024, 256, peak, 128, bf16 ? 300 : 200) + R.gemm_overhead_s, 1e-12);
  }
}

// The figure the probe stores from a measured rate gives back that rate at the probe's shape.
TEST(PlanGemmRows, TheProbesShapeIsPricedAtItsMeasuredRate) {
  HardwareProfile h = rows_profile();
  h.kernel_overhead_s = 0;
  const double rate = 0.4 * h.peak_fp32, M = 128, N = 1024, K = 1024;
  h.gemm_half_rows = half_rate_dim(M, h.peak_fp32, rate);
  const ComputeRates R = compute_rates(h, Precision::fp32, 1, 1);
  EXPECT_NEAR(local_gemm_seconds(R, M, N, K), 2 * M * N * K / rate, 1e-12);
  EXPECT_DOUBLE_EQ(half_rate_dim(64, 1e9, 2e9), 0.0);  // faster than the peak: no penalty
}

// The probes run the engine's GEMM paths and store a measured (non-zero) finite figure.
TEST(PlanGemmRows, TheProbesStoreAMeasuredFigure) {
  HardwareProfile h = rows_profile();
  h.gemm_half_rows = h.gemm_half_rows_bf16 = 0;
  std::ostringstream log;
  measure_gemm_half_rows(h, ProbeRun{0.02, 1, log});
  EXPECT_TRUE(std::isfinite(h.gemm_half_rows));
  EXPECT_GT(h.gemm_half_rows, 0);
  if (!bf16_matmul_supported()) return;
  measure_bf16_half_rows(h, ProbeRun{0.02, 1, log});
  EXPECT_TRUE(std::isfinite(h.gemm_half_rows_bf16));
  EXPECT_GT(h.gemm_half_rows_bf16, 0);
}

}  // namespace
}  // namespace mt::plan
