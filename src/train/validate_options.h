// Every rule a user can break with the options of a training run, in one place, checked
// before any rank starts (and, under mpirun, in every process before MPI is initialised).
// A pure function of the options and of what the launcher said: no file is read, no
// environment variable is looked at. Rules that need files (the data's token ids, a
// checkpoint's step, paths) belong to the resolution in cli/train_setup.cpp; the layers
// below keep internal-invariant checks (MT_CHECK) only.
#pragma once

#include <string>
#include <vector>

#include "core/launcher.h"
#include "train/options.h"

namespace mt {

// Throws UsageError (exit 2) with one line naming the flag and what to change. Call it on
// options whose model shape is resolved (vocab from the data, shape from --init-from).
// launcher: the processes a launcher started (launcher_from_env()); the default is none.
void validate_train_options(const TrainOptions& o, const LauncherInfo& launcher = {});
// The rules of the model and the layout alone, without the CPU engine's capacity (ranks,
// elements and token rows this engine counts): what the planner checks of a layout it
// plans for GPU software, which counts for itself.
void validate_layout_rules(const TrainOptions& o);
// Settings that are accepted but change nothing in this run (each a line for a warning).
// Every other flag that would have no effect is refused by validate_train_options.
std::vector<std::string> option_warnings(const TrainOptions& o);

}  // namespace mt
