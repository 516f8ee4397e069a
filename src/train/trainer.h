// The training loop one rank runs (the same code on both backends). Per step: load the
// rank's slice of the global batch, forward + backward every microbatch, reduce gradients
// over data-parallel replicas, check finiteness, clip by the global norm, AdamW, then
// metrics, progress, evaluation and checkpoints.
#pragma once

#include <vector>

#include "comm/world.h"
#include "train/options.h"

namespace mt {

struct RunInfo {
  double peak_gflops_per_thread = 0;  // measured sgemm peak, for MFU
  double t0 = 0;                      // job start (steady clock), for traces
};

struct TrainSummary {
  std::vector<double> losses;  // per step (rank 0)
  double final_val_loss = -1;
};

// Runs on every rank; rank 0 writes metrics, traces, exports and prints.
TrainSummary train_rank(const TrainOptions& opts, CommWorld& world, const RunInfo& info);

}  // namespace mt
