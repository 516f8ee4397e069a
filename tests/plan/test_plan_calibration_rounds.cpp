// The calibration's rounds (plan/calibration_rounds.h) and the band a local plan states with
// its prediction (plan/prediction_band.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "plan/calibration_rounds.h"
#include "plan/plan_report.h"
#include "plan/prediction_band.h"
#include "plan/search.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

// A stand-in for the engine's reference step: factor x 100 ms of kernels + 1 ms.
double toy_reference(const HardwareProfile& h, Precision p) {
  const double factor = p == Precision::bf16 ? h.step_factor_bf16 : h.step_factor_fp32;
  return factor * 0.100 + 0.001;
}

// Three rounds of a drifting machine: the first round fast, the last slow; the best round of
// each figure is never its median.
std::vector<HardwareProfile> drifting_rounds() {
  std::vector<HardwareProfile> rounds(3, testing::synthetic_local());
  const double peaks[] = {300e9, 100e9, 200e9}, steps[] = {0.120, 0.100, 0.140};
  const double factors[] = {1.0, 1.5, 0.8};
  for (size_t i = 0; i < 3; ++i) {
    rounds[i].peak_fp32 = peaks[i];
    rounds[i].reference_step_s = steps[i];
    rounds[i].step_factor_fp32 = factors[i];
  }
  rounds[1].memory_bw = 0;  // a probe that failed in one round
  rounds[0].memory_bw = 8e9, rounds[2].memory_bw = 12e9;
  return rounds;
}

TEST(PlanCalibrationRounds, EachFigureIsTheMedianOfTheRoundsNotTheFirstOrTheBest) {
  const HardwareProfile h = combine_rounds(drifting_rounds(), toy_reference);
  EXPECT_DOUBLE_EQ(h.peak_fp32, 200e9);  // first 300, best 300, median 200
  EXPECT_DOUBLE_EQ(h.memory_bw, 10e9);   // the median of the rounds that measured it
  EXPECT_DOUBLE_EQ(h.reference_step_s, 0.120);
  EXPECT_DOUBLE_EQ(median_of_measured({0, 0}), 0);
  EXPECT_DOUBLE_EQ(median_of_measured({3, 0, 1, 2}), 2);
}

TEST(PlanCalibrationRounds, TheCombinedProfilePredictsTheMedianReferenceStep) {
  // The median factor (1.0) with the toy kernels predicts 101 ms; the rounds' median
  // reference step is 120 ms, and the combined profile must predict that.
  const HardwareProfile h = combine_rounds(drifting_rounds(), toy_reference);
  EXPECT_NEAR(toy_reference(h, Precision::fp32), 0.120, 1e-6);
  EXPECT_NEAR(h.step_factor_fp32, 1.19, 1e-6);
}

TEST(PlanCalibrationRounds, TheBandIsTheFastestAndSlowestRoundOverTheMedian) {
  const HardwareProfile h = combine_rounds(drifting_rounds(), toy_reference);
  EXPECT_DOUBLE_EQ(h.step_low_fp32, 0.100 / 0.120);
  EXPECT_DOUBLE_EQ(h.step_high_fp32, 0.140 / 0.120);
  EXPECT_EQ(h.step_low_bf16, 0);  // bf16 not measured: no band
  // One round is no spread: no band, rather than a band of zero width.
  const HardwareProfile one = combine_rounds({drifting_rounds()[0]}, toy_reference);
  EXPECT_EQ(one.step_low_fp32, 0);
  EXPECT_EQ(one.step_high_fp32, 0);
}

TEST(PlanPredictionBand, ALocalPlanStatesItsBandInTheTableAndTheJson) {
  PlanRequest r = testing::small_request(1);
  r.hardware.step_low_fp32 = 0.9, r.hardware.step_high_fp32 = 1.2;
  const SearchResult s = search_layouts(r, 1);
  ASSERT_FALSE(s.candidates.empty());
  const double step = s.candidates[0].time.step_s;
  const nlohmann::json j = nlohmann::json::parse(plan_json(r, s, 1));
  const auto band = j["candidates"][0]["predicted"]["step_time_band_s"];
  ASSERT_TRUE(band.is_array());
  EXPECT_DOUBLE_EQ(band[0].get<double>(), 0.9 * step);
  EXPECT_DOUBLE_EQ(band[1].get<double>(), 1.2 * step);
  std::ostringstream table;
  print_table(table, r, s, 1);
  EXPECT_NE(table.str().find("-10.0% .. +20.0%"), std::string::npos) << table.str();
}

TEST(PlanPredictionBand, NoBandWithoutTheCalibrationsRounds) {
  PlanRequest r = testing::small_request(1);
  const SearchResult s = search_layouts(r, 1);
  const nlohmann::json j = nlohmann::json::parse(plan_json(r, s, 1));
  EXPECT_FALSE(j["candidates"][0]["predicted"].contains("step_time_band_s"));
  std::ostringstream table;
  print_table(table, r, s, 1);
  EXPECT_EQ(table.str().find("band"), std::string::npos);
}

}  // namespace
}  // namespace mt::plan
