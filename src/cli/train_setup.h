// Turns parsed TrainOptions into a run: fills defaults that depend on files (the embedded
// corpus, the vocabulary of the data, the shape of an --init-from file), checks the paths,
// then applies every rule of the options (train/validate_options.h), measures the sgemm
// peak for MFU, and launches the ranks on the chosen backend.
#pragma once

#include <string>

#include "train/options.h"

namespace mt {

// Resolves in place, then validates; throws UsageError with the flag to change.
void resolve_train_options(TrainOptions& o);
// train --print-layout: the options' rules (no files read), then which process runs which
// ranks and where each group communicates (parallel/process_layout.h).
std::string describe_train_layout(const TrainOptions& o);
// Returns the exit code.
int run_training(TrainOptions o, int* argc, char*** argv);

}  // namespace mt
