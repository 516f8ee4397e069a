// How `meshtrain plan --calibrate` turns its interleaved rounds into one profile. The machine
// drifts within minutes (the same fp32 step read 171 -> 144 ms over four minutes on this
// guest, docs/planner.md), so the calibration runs every probe once per round, round after
// round across its whole run, and keeps for each figure the median over the rounds: not the
// first round (whatever minute it landed in) and not the best (the least disturbed run,
// faster than the steps that follow). The rounds' spread of the reference step is kept as the
// band a plan states with its prediction.
#pragma once

#include <functional>
#include <iosfwd>
#include <vector>

#include "model/precision.h"
#include "plan/hardware_profile.h"

namespace mt::plan {

// The median of the nonzero values (0: not measured in that round); 0 when none is.
double median_of_measured(std::vector<double> values);

// What a profile predicts for the one-microbatch reference step (reference_steps.cpp), per
// precision; 0 where it cannot.
using ReferencePrediction = std::function<double(const HardwareProfile&, Precision)>;

// One profile from the rounds' profiles: every measured number the median over the rounds.
// The step factors are then scaled so that the combined profile predicts the median of the
// rounds' measured reference steps (the median kernel figures and the median factor come from
// different rounds), and the band (step_low_* / step_high_*) is the fastest and slowest
// round's reference step over that median. Integer, boolean, text and software fields come
// from the first round.
HardwareProfile combine_rounds(const std::vector<HardwareProfile>& rounds,
                               const ReferencePrediction& predict);

// Logs the reference step's median over the rounds and the band of its rounds, per precision
// that has one.
void log_band(const HardwareProfile& h, int rounds, std::ostream& log);

}  // namespace mt::plan
