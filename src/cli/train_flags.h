// The flags of `meshtrain train`, registered on one TrainOptions: the command line and the
// config file (train_command.cpp), a checkpoint's record of its run (recorded_config.h) and
// `bench step`, read and written through the same registry so they never disagree.
#pragma once

#include "cli/flag_set.h"
#include "train/options.h"

namespace mt {

void define_train_flags(FlagSet& f, TrainOptions& o);

}  // namespace mt
