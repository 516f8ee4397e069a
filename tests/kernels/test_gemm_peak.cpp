// The one GEMM-peak measurement (kernels/gemm_peak.h) every mfu denominator comes from: it
// names the routine and the square size its best run had, for both precisions alike. No
// timing is asserted.
#include <gtest/gtest.h>

#include <omp.h>

#include "kernels/gemm_peak.h"
#include "kernels/matmul_bf16.h"

namespace mt {
namespace {

void expect_well_formed(PeakPrecision p, const GemmPeak& peak) {
  EXPECT_GT(peak.gflops, 0.0);
  EXPECT_TRUE(peak.n == 512 || peak.n == 1024 || peak.n == 2048) << peak.n;
  const std::string text = describe_gemm_peak(p, peak, 1);
  for (const char* part : {"GFLOP/s per thread", "after a warm-up", "wall time", "best run"})
    EXPECT_NE(text.find(part), std::string::npos) << part << ": " << text;
  // At least two rounds, so one disturbed window cannot be the whole measurement.
  EXPECT_GE(peak.rounds, 2);
  EXPECT_LE(peak.rounds, 4);
  EXPECT_TRUE(peak.settled || peak.rounds == 4) << peak.rounds;
  EXPECT_NE(text.find(std::to_string(peak.rounds) + " rounds"), std::string::npos) << text;
}

TEST(GemmPeak, Fp32NamesItsRoutineAndSize) {
  const GemmPeak peak = measure_gemm_peak(PeakPrecision::fp32, 1, 0.02);
  expect_well_formed(PeakPrecision::fp32, peak);
  EXPECT_EQ(peak.kernel, "oneDNN sgemm");
  EXPECT_EQ(describe_gemm_peak(PeakPrecision::fp32, peak, 1).rfind("fp32 GEMM peak", 0), 0u);
}

TEST(GemmPeak, Bf16IsMeasuredTheSameWayOnTheModelsRoutine) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  const GemmPeak peak = measure_gemm_peak(PeakPrecision::bf16, 1, 0.02);
  expect_well_formed(PeakPrecision::bf16, peak);
  EXPECT_EQ(peak.kernel, matmul_bf16_isa());
}

TEST(GemmPeak, LeavesTheCallersThreadSettingAlone) {
  omp_set_num_threads(2);
  measure_gemm_peak(PeakPrecision::fp32, 1, 0.01);
  EXPECT_EQ(omp_get_max_threads(), 2);
  omp_set_num_threads(1);
}

TEST(GemmPeak, PerThreadFigureInTheDescription) {
  GemmPeak peak;
  peak.gflops = 200, peak.n = 1024, peak.kernel = "k", peak.rounds = 2, peak.settled = true;
  const std::string text = describe_gemm_peak(PeakPrecision::fp32, peak, 2);
  EXPECT_NE(text.find("100.0 GFLOP/s per thread"), std::string::npos) << text;
  EXPECT_NE(text.find("2 rounds, the last two within 5%"), std::string::npos) << text;
}

// Rounds that never agreed leave a figure the reader should distrust; the description says so.
TEST(GemmPeak, AnUnsettledMeasurementSaysTheMachineWasDisturbed) {
  GemmPeak peak;
  peak.gflops = 100, peak.n = 512, peak.kernel = "k", peak.rounds = 4, peak.settled = false;
  EXPECT_NE(describe_gemm_peak(PeakPrecision::fp32, peak, 1)
                .find("4 rounds that never agreed within 5%: a disturbed machine"),
            std::string::npos);
}

}  // namespace
}  // namespace mt
