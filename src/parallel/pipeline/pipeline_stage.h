// What the trainer needs around the executor when --pp > 1, kept here so the training
// loop stays short: the layer split, the schedule's theoretical bubble and exact sums of
// doubles across a group (the tied embedding's sum is in tied_embedding.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/rank_order_sum.h"
#include "model/config.h"
#include "parallel/pipeline/schedule.h"

namespace mt {

// Blocks per model chunk (pp * v entries): --stage-layers when given (UsageError naming it
// otherwise), else partition_layers() with the FLOP cost model of stage_partition.h.
std::vector<int> resolve_stage_layers(const ModelConfig& cfg, int pp, int virtual_stages,
                                      const std::string& stage_layers);

// The bubble the schedule would have with F = B = W: the closed form where one exists
// ((p-1)/(m+p-1), interleaved (p-1)/(v*m+p-1)), else the simulator's (zb-h1).
double theoretical_bubble(const Schedule& s);

// The measured bubble of one step, averaged over the group's ranks: each rank's idle time
// against the pipeline's step time, which is the slowest rank's (a stage that finishes
// its last backward early waits for the others before the optimizer step, as the
// theory's makespan assumes). Collective over group.
double pipeline_bubble(Communicator& group, double busy_seconds, double step_seconds);

}  // namespace mt
