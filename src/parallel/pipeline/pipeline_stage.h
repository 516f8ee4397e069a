// Layer split and bubble helpers around the executor (the session, the pipeline runner and
// the memory estimate use them): the blocks per model chunk, the schedule's theoretical
// bubble and the measured one over a group.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/config.h"
#include "schedule/schedule.h"

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
