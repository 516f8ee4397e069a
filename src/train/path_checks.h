// Every path a training run reads or writes, checked once before any rank starts
// (docs/checkpoints.md, "What a run refuses"): inputs are regular files, a checkpoint to
// load passes verify_checkpoint, outputs can be written now, no output is an input or
// another output, nothing is written inside the directory a save replaces, and that
// directory holds nothing but a checkpoint. A mistake is one UsageError line (exit 2),
// found in milliseconds instead of after the last step.
#pragma once

#include <string>

#include "train/options.h"

namespace mt {

// Resolves --save to the directory it names (through symlinks), so that the atomic swap
// replaces that directory rather than failing on the link after the run.
void resolve_save_path(IoOptions& io);

struct PathCheckReport {
  bool checkpoint_verified = false;  // --load's checksums present and matching
  uint64_t checkpoint_bytes_verified = 0;
};

// --load DIR names a sharded checkpoint (a manifest, or a step_NNNNNN[.tmp] name: the
// sharded checks then say what is wrong with it).
bool loads_sharded(const std::string& dir);

// Throws UsageError naming the flag, the path and what to change.
PathCheckReport check_run_paths(const TrainOptions& o);

}  // namespace mt
