// Which checkpoint a command means by the directory it was given, the same for every command
// that reads one (`checkpoint verify`, `export --from`, `sample --load`, `train --load`):
//   - a checkpoint itself: a global one (state.json) or one sharded step folder (manifest);
//   - a run folder (--save DIR of sharded checkpoints): its newest complete step_NNNNNN.
// Anything else is refused naming the command's flag and what was looked for. The chosen
// checkpoint is then verified by the command as before (a damaged newest step is an error,
// not silently skipped: --resume auto is the command that skips).
#pragma once

#include <string>

namespace mt {

// `where` names the command's argument in errors: "--load", "--from", "checkpoint verify".
std::string resolve_checkpoint_dir(const std::string& where, const std::string& dir);

}  // namespace mt
