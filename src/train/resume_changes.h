// A resumed run against the run its checkpoint recorded (issue #31, item 2; docs/checkpoints.md,
// "A resume remembers its run"). The checkpoint's model is the model: a flag that contradicts
// its shape is refused. Training settings (lr, schedule, steps, batch, ...), the data and the
// layout may change on purpose; each change is announced in one line, with what it does to
// the learning rate where it touches the schedule, because a silently re-stretched cosine
// was the surprise (lr 1.00e-04 at step 60, 1.27e-03 at step 61).
#pragma once

#include <string>
#include <vector>

#include "train/options.h"

namespace mt {

// A flag the user gave whose value differs from the one the checkpoint recorded.
struct ConfigChange {
  std::string flag;           // without dashes, e.g. "steps"
  std::string before, after;  // as text: recorded, given
};

// Throws UsageError (naming both values and the checkpoint) for a change of the model's
// shape: a shape flag of hf_config.h's table whose value, as the model uses it, differs, or
// --seq of a model with learned positions; and for a change of the sample order the data
// position counts in: --data-order, or --seed when the recorded order is shuffled (the
// position would then repeat and skip samples). Returns one line per other change, e.g.
//   "resumed from step 60 of out/g2; changed: --steps 60 -> 100 (the cosine schedule now ends
//    at step 100; lr at step 61 is 1.27e-03)".
// recorded: the options as the checkpoint's run had them; now: as this run will.
std::vector<std::string> resume_change_lines(const std::vector<ConfigChange>& changes,
                                             const TrainOptions& recorded, const TrainOptions& now,
                                             int start_step, const std::string& dir);

}  // namespace mt
