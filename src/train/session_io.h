// A session's state in files, always in the global view (checkpoint.h): --save writes it
// to rank 0 and --load distributes it, so any layout loads what any other saved; at the end
// of a run --export, --export-hf and the sample take the whole model on rank 0.
#pragma once

#include <functional>
#include <string>

#include "train/session.h"

namespace mt {

// Writes --save DIR at `step`: weights, both AdamW moments, router biases, data position.
// Collective over the world; the directory is complete when every rank returns.
void save_session(Session& s, int step);

// Restores --load DIR into the session (weights, moments, router biases, data position) and
// sets s.start_step. Collective over the world. No-op without --load.
void load_session(Session& s);

// End of training: puts the weights back into the model's own arenas (ending data
// parallelism's hold on them), then writes --export and --export-hf and prints the sample
// (rank 0) through `line`. Collective over the world.
void write_final_outputs(Session& s, const std::function<void(const std::string&)>& line);

}  // namespace mt
