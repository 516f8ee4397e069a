// Step time of a candidate. Per pipeline stage, the forward (F), input-gradient (B) and
// weight-gradient (W) time of one microbatch is summed from its blocks' GEMMs (hardware
// costs), memory-bound ops (LayerNorm, GELU, softmax, residuals, cross-entropy) and its
// exposed tensor-/expert-parallel communication; the engine's own schedule simulator
// (schedule/schedule_simulator.h) then plays the schedule with these per-stage
// costs, so the bubble, uneven stages and the p2p latency come from the same code that
// draws the schedules. After the pipeline: the data-parallel gradient reduction (minus
// the part overlapped with the last microbatch's backward), the ZeRO gathers and the
// AdamW step. Every assumption is listed by time_assumptions() (printed by --explain).
#pragma once

#include <string>
#include <vector>

#include "plan/layout.h"
#include "schedule/schedule.h"
#include "schedule/schedule_simulator.h"

namespace mt::plan {

struct StageCosts {
  double forward = 0, backward = 0, weight = 0;  // one microbatch, the whole stage
  double tp_comm = 0, ep_comm = 0, cp_comm = 0;  // exposed, included above
  double recompute = 0;                          // repeated forward work, inside backward
  double params = 0;                             // parameters on the stage's ranks (per rank)
  double expert_params = 0;
  int blocks = 0;             // transformer blocks on the stage
  double linear_weights = 0;  // elements of the linears' weights (local bf16: rounded per step)
  double tile_weights = 0;    // of which on the dense bf16 tiles (local_on_tiles): packed instead
  double expert_pack_weights = 0;  // of which experts' packed per step (expert_pack_s)
};

struct PredictedTime {
  double step_s = 0;
  double pipeline_s = 0;  // the simulator's makespan (or m x (F+B+W) without pp)
  double bubble = 0;      // the simulator's idle fraction
  double tp_exposed_s = 0, ep_exposed_s = 0, cp_exposed_s = 0, dp_exposed_s = 0, pp_p2p_s = 0;
  double zero3_exposed_s = 0, optimizer_s = 0;
  double dp_sms_s = 0;  // of dp_exposed_s: the computation lost to the hidden dp collectives' SMs
  // Of dp_exposed_s: the pipeline replay's gradient syncs past its makespan, until the last
  // stage's are done (grad_sync_placement; time_model.cpp, add_grad_syncs).
  double grad_sync_tail_s = 0;
  double recompute_s = 0;  // extra forward work in the backward (slowest stage)
  // Local, more rank threads than cores: the waits per rank and step that sleep
  // (rank_waits.h) and the wall their wake-ups add (at oversubscribed_wake_s), in step_s.
  double blocking_waits = 0, wake_s = 0;
  double bf16_weights_s = 0;  // local bf16: rounding the weight copies, once per step
  std::vector<StageCosts> stages;
  bool pruned = false;
};

// Local: the busiest ep rank's expert rows over the mean rank's (1 for ep 1 or a profile
// without moe_load_cv): the expected maximum under the calibrated per-expert load spread.
double busiest_rank_load(const HardwareProfile& hw, const ModelConfig& m, int ep);

// Per-stage costs of one microbatch (stage_costs.cpp, from cost_model.h's cost models;
// exposed so tests can check the simulator's use).
std::vector<StageCosts> stage_costs(const PlanRequest& r, const Layout& l);

// Local, more rank threads than cores (ranks x threads > the calibrated cores): the request
// as priced on dedicated cores, with the calibrated oversubscribed latency for every
// collective step and send under the local backend (a waiting rank blocks until a peer
// that was not running arrives, comm/local/doorbell.h) and every rank at full speed; then,
// when the profile knows its cores, how they are shared: `slowdown` = threads / cores for
// what every rank runs at once, `width` = a stage's threads (dp x cp x tp x threads) for the
// pipeline replay (shared_cores_makespan).
// With a calibrated oversubscribed_busbw, the collectives' bytes are priced at it, and as
// a wait (collective_bytes_wait) like their latency: it is the wall they add there.
// predict_time then prices the step as the larger of the work over the cores and the
// critical path with the waits (a waiting rank yields its core to one that computes).
struct Oversubscription {
  PlanRequest dedicated;
  bool shared = false;
  double slowdown = 1, width = 1;
  bool collective_bytes_wait = false;
};
Oversubscription oversubscription(const PlanRequest& r, const Layout& l);

// give_up_above: when the slowest stage's compute alone (microbatches x (F+B+W), a lower
// bound of any schedule) exceeds it, returns at once with pruned set and step_s = that
// bound (the search skips the simulation of layouts that cannot enter its top list).
PredictedTime predict_time(const PlanRequest& r, const Layout& l, const Schedule& schedule,
                           double give_up_above = 1e300);

// Local, more rank threads than cores: the schedule played as the simulator plays it
// (every stage its actions in order, a receive waits for its message), except that the
// stages computing at a moment share the cores: each of the n computing stages, `width`
// threads each (its dp x cp x tp ranks' threads), advances at min(1, cores / (n width)) of full
// speed (processor sharing; a stage waiting for a message blocks and leaves its cores).
// `efficiency` (the profile's parallel_efficiency; 0: none): the costs are priced with every
// stage computing (compute_rates at min(stages x width, cores) busy threads); while fewer
// threads compute, the cores that run them are that much faster (busy_speedup): a stage
// alone in a pipeline's warm-up or cool-down runs at one core's rate.
// Returns the makespan. `blocked` (when given): per stage, the receives it reached before
// their message was sent (a block, rank_waits.h).
double shared_cores_makespan(const Schedule& s, const std::vector<OpCosts>& costs, double width,
                             double cores, double efficiency = 0,
                             std::vector<int>* blocked = nullptr);

// How much faster than priced at `priced` busy threads a core runs with `busy` computing:
// compute_rates' share of one core's rate (1 at one busy core, linear down to `efficiency`
// at every core) at min(busy, cores) over that at min(priced, cores); 1 without a figure.
double busy_speedup(double efficiency, double cores, double priced, double busy);

// One line per modelling assumption, for --explain (time_assumptions.cpp): the cost
// model's, then the software's constants with their sources (software_profiles.h).
std::vector<std::string> time_assumptions(const PlanRequest& r);

}  // namespace mt::plan
