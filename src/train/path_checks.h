// Every path a training run reads or writes, checked once before any rank starts
// (docs/checkpoints.md, "What a run refuses"): inputs are regular files, a checkpoint to
// load verifies, outputs can be written now, no output is an input or another output, and
// --save passes the checkpoint rules (checkpoint/checkpoint_paths.h). A mistake is one
// UsageError line (exit 2), found in milliseconds instead of after the last step.
#pragma once

#include <string>

#include "train/options.h"

namespace mt {

struct PathCheckReport {
  bool checkpoint_verified = false;  // --load's checksums present and matching
  uint64_t checkpoint_bytes_verified = 0;
};

// Throws UsageError naming the flag, the path and what to change.
PathCheckReport check_run_paths(const TrainOptions& o);

}  // namespace mt
