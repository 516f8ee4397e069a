// One optimizer step on a session, as a short sequence of named phases:
//   load batch -> forward + backward over the microbatches (the runner) -> finish gradients
//   (data-parallel reduction, sequence-parallel partial sums, the runner's copies) -> loss
//   and global norm -> finite check -> clipping coefficient -> optimizer step (clipping applied
//   as AdamW reads the gradients, + post-update finite check,
//   ZeRO all-gather, router bias balancing) -> the step's record.
// Every rank calls it with the same step; the record is the same on every rank apart from
// timings.
#pragma once

#include <cstdint>
#include <optional>

#include "parallel/microbatch_runner.h"
#include "train/session.h"
#include "train/trace.h"

namespace mt {

// Bytes, calls and wait time of one group (tp, cp) during one step.
struct GroupComm {
  uint64_t bytes = 0, calls = 0;
  double wait_s = 0;
};

// Wall seconds of the step's phases (benches break a step down with them).
struct StepPhases {
  double forward_backward = 0;  // the runner: every microbatch's forward and backward
  double gradients = 0;         // waiting for the reduction, partial sums, the runner's copies
  double norm_and_clip = 0;     // loss and global norm (collective), finite check (the clip
                                // itself rides on AdamW's read of the gradients: optimizer)
  double optimizer = 0;         // AdamW, the post-update finite check, ZeRO gathers, router bias
};

// One record per optimizer step (docs/contracts.md §6); to_json (records.h) writes it.
struct StepRecord {
  int step = 0;  // 1 = the first update
  double loss = 0, lr = 0, grad_norm = 0;
  double step_time_s = 0, tokens_per_s = 0, mfu = 0;
  double comm_exposed_s = 0;    // the compute thread blocked on data-parallel communication
  uint64_t comm_bytes = 0;      // sent on the dp and tp groups
  uint64_t data_hash = 0;       // where the global batch's sequences start (DataLoader::batch_hash)
  std::optional<GroupComm> tp;  // with tensor parallelism
  // With context parallelism: the K/V (and dK/dV) traffic; wait_s is the part of the
  // transfers not hidden behind the attention (docs/context_parallel.md).
  std::optional<GroupComm> cp;
  // With expert parallelism: the MoE token all-to-alls; wait_s is the part of them not
  // hidden behind the experts' compute (docs/moe.md, "Overlapped all-to-all").
  std::optional<GroupComm> ep;
  std::optional<BubbleMeasure> bubble;  // with a pipeline
  std::optional<double> val_loss;       // on evaluation steps (set by the trainer)
  MicrobatchStats microbatches;         // what the runner reported
  StepPhases phases;
};

// step: 1-based; the learning rate is the schedule's at step - 1. Throws RuntimeError on a
// non-finite loss, gradient or update (on every rank, before anything is written).
StepRecord train_step(Session& s, int step, Trace& trace);

}  // namespace mt
