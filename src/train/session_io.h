// What a session leaves at the end of a run: --export, --export-hf and the sample take the
// whole model on rank 0 (global_view.h). (Checkpoints are checkpoint/checkpointer.h's.)
#pragma once

#include <functional>
#include <string>

#include "train/session.h"

namespace mt {

// End of training: puts the weights back into the model's own arenas (ending data
// parallelism's hold on them), then writes --export and --export-hf and prints the sample
// (rank 0) through `line`. Collective over the world.
void write_final_outputs(Session& s, const std::function<void(const std::string&)>& line);

}  // namespace mt
