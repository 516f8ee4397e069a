#include "plan/calibration_rounds.h"

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <tuple>

#include "core/error.h"
#include "plan/profile_fields.h"

namespace mt::plan {

namespace {

// The fields the reference steps set, per precision (reference_steps.cpp).
struct StepFields {
  Precision precision;
  double HardwareProfile::*reference, HardwareProfile::*factor, HardwareProfile::*low,
      HardwareProfile::*high;
};

const StepFields kSteps[] = {
    {Precision::fp32, &HardwareProfile::reference_step_s, &HardwareProfile::step_factor_fp32,
     &HardwareProfile::step_low_fp32, &HardwareProfile::step_high_fp32},
    {Precision::bf16, &HardwareProfile::reference_step_s_bf16, &HardwareProfile::step_factor_bf16,
     &HardwareProfile::step_low_bf16, &HardwareProfile::step_high_bf16}};

// Every measured number of the profile: the median over the rounds.
HardwareProfile median_fields(const std::vector<HardwareProfile>& rounds) {
  HardwareProfile h = rounds.front();
  for (const ProfileField& f : profile_fields()) {
    const auto* member = std::get_if<double HardwareProfile::*>(&f.member);
    if (!member || f.software) continue;
    std::vector<double> values;
    for (const HardwareProfile& r : rounds) values.push_back(r.**member);
    h.** member = median_of_measured(values);
  }
  return h;
}

// The step factor for which `h` predicts `measured` for the reference step. The prediction is
// factor x kernels + a per-microbatch term, so a few proportional corrections converge.
void match_reference(HardwareProfile& h, const StepFields& s, double measured,
                     const ReferencePrediction& predict) {
  for (int i = 0; i < 4 && h.*s.factor > 0; ++i) {
    const double predicted = predict(h, s.precision);
    if (predicted <= 0) return;
    h.*s.factor = std::clamp(h.*s.factor * measured / predicted, 0.5, 3.0);
  }
}

// The fastest and slowest round's reference step over the median: 0 (no band) with fewer
// than two measured rounds.
void band(HardwareProfile& h, const StepFields& s, const std::vector<HardwareProfile>& rounds) {
  std::vector<double> measured;
  for (const HardwareProfile& r : rounds)
    if (r.*s.reference > 0) measured.push_back(r.*s.reference);
  const double median = h.*s.reference;
  if (measured.size() < 2 || median <= 0) {
    h.*s.low = h.*s.high = 0;
    return;
  }
  const auto [lo, hi] = std::minmax_element(measured.begin(), measured.end());
  h.*s.low = *lo / median;
  h.*s.high = *hi / median;
}

}  // namespace

double median_of_measured(std::vector<double> values) {
  values.erase(std::remove(values.begin(), values.end(), 0.0), values.end());
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

HardwareProfile combine_rounds(const std::vector<HardwareProfile>& rounds,
                               const ReferencePrediction& predict) {
  MT_CHECK(!rounds.empty(), "combine_rounds without rounds");
  if (rounds.size() == 1) return rounds.front();
  HardwareProfile h = median_fields(rounds);
  for (const StepFields& s : kSteps) {
    if (h.*s.reference > 0) match_reference(h, s, h.*s.reference, predict);
    band(h, s, rounds);
  }
  return h;
}

void log_band(const HardwareProfile& h, int rounds, std::ostream& log) {
  char line[200];
  for (auto [name, ref, lo, hi] :
       {std::tuple{"fp32", h.reference_step_s, h.step_low_fp32, h.step_high_fp32},
        std::tuple{"bf16", h.reference_step_s_bf16, h.step_low_bf16, h.step_high_bf16}}) {
    if (ref <= 0 || lo <= 0) continue;
    std::snprintf(line, sizeof line,
                  "reference step (%s, one microbatch) over %d rounds: median %.1f ms, rounds "
                  "%+.1f%% .. %+.1f%%\n",
                  name, rounds, ref * 1e3, 100 * (lo - 1), 100 * (hi - 1));
    log << line;
  }
}

}  // namespace mt::plan
