// The band a local plan states with its predicted step: the range the calibration's own
// rounds read for the reference step, around their median (calibration_rounds.h), applied to
// the prediction. It is the machine's drift within one calibration, not an error bound of
// the time model: a layout may still be mispredicted inside it.
#pragma once

#include <optional>
#include <string>

#include "model/precision.h"
#include "plan/hardware_profile.h"

namespace mt::plan {

struct StepBand {
  double low_s, high_s;  // the prediction at the fastest and the slowest round
};

// None for a profile without a band (GPU presets, one-round calibrations, older profiles).
std::optional<StepBand> step_band(const HardwareProfile& h, Precision precision, double step_s);

// "band 95.1 .. 104.3 ms (the calibration's 3 rounds read the reference step -4.9% .. +4.3%)",
// or "" without a band.
std::string step_band_text(const HardwareProfile& h, Precision precision, double step_s);

}  // namespace mt::plan
