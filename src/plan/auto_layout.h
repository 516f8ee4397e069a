// `meshtrain train --auto-layout --ranks N`: the planner chooses the layout knobs the user
// did not set, from the local hardware profile (meshtrain plan --calibrate), and says why.
#pragma once

#include <string>

#include "train/options.h"

namespace mt::plan {

// Sets o.parallel's dp, tp, pp, ep, zero, sequence_parallel, schedule, virtual_stages,
// microbatches and o.optim.recompute to the best candidate for o.parallel.ranks ranks,
// keeping those named in o.parallel.fixed. cp is never searched here (cp 1 unless given):
// a given --cp (with its --cp-comm) is planned around as a fixed knob. Returns the line to print:
// the choice, its predicted step time and memory, and the runner-up it beat. UsageError when there
// is no profile, or nothing valid fits.
std::string apply_auto_layout(TrainOptions& o, const std::string& profile_path);

}  // namespace mt::plan
