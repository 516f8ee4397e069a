#include "plan/prediction_band.h"

#include <cstdio>

namespace mt::plan {

std::optional<StepBand> step_band(const HardwareProfile& h, Precision precision, double step_s) {
  const bool bf16 = precision == Precision::bf16;
  const double lo = bf16 ? h.step_low_bf16 : h.step_low_fp32;
  const double hi = bf16 ? h.step_high_bf16 : h.step_high_fp32;
  if (!h.local || lo <= 0 || hi <= 0) return std::nullopt;
  return StepBand{step_s * lo, step_s * hi};
}

std::string step_band_text(const HardwareProfile& h, Precision precision, double step_s) {
  const std::optional<StepBand> b = step_band(h, precision, step_s);
  if (!b) return "";
  char line[200];
  std::snprintf(line, sizeof line,
                "band %.1f .. %.1f ms (the calibration's rounds read the %s reference step "
                "%+.1f%% .. %+.1f%% around their median)",
                b->low_s * 1e3, b->high_s * 1e3, precision_name(precision),
                100 * (b->low_s / step_s - 1), 100 * (b->high_s / step_s - 1));
  return line;
}

}  // namespace mt::plan
