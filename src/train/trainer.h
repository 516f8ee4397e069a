// The training loop one rank runs (the same code on both backends): build the session,
// then per step train_step (step.h), evaluation, metrics and progress, checkpoints; at the
// end the final checkpoint, --export, the sample and the trace.
#pragma once

#include "comm/world.h"
#include "train/options.h"
#include "train/session.h"

namespace mt {

// Runs on every rank; rank 0 writes metrics, traces, exports and prints.
void train_rank(const TrainOptions& opts, CommWorld& world, const RunInfo& info);

}  // namespace mt
