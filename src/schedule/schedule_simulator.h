// Times a schedule: given per-op costs, every stage runs its actions in order (the order of
// execution_order.h: an FB's halves one after the other, each waiting only for its own
// input), as early as its inputs allow. Sends take no stage time and their message arrives
// `latency` later; a receive waits for its message (the semantics of schedule.h). The result
// is each action's start and end, the makespan, and the bubble = idle / (stages * makespan).
#pragma once

#include <string>
#include <vector>

#include "schedule/schedule.h"

namespace mt {

struct OpCosts {
  double forward = 1, backward = 1, weight = 1;  // per action (per chunk when interleaved)
  double latency = 0;                            // send -> matching receive may complete
  // How much of an FB's two computations overlap, as a fraction of the shorter one: its B
  // half may start fb_overlap * min(F, B) before its F half ends (once its input is in).
  // 0 on this engine, which computes the halves one after the other (execution_order.h);
  // 1 models an engine that runs them at once at full speed (F&B = max(F, B)).
  double fb_overlap = 0;
  // The stage's data-parallel gradient sync, per local chunk, where grad_sync_points.h puts
  // it (off when `on` is false): `pass` seconds of the stage's compute stream (the
  // data-parallel wrapper's passes over the chunk's gradient buffer) at that point, then the
  // chunk's collective, `reduce` seconds on the stage's communication stream, one chunk's
  // after the other's. A sync started from its chunk's own last gradient computation (delay
  // 0) may begin its collective `hidden` x that computation before it ends (the buckets'
  // hooks fire as the backward produces them). The stage ends when its last collective does
  // (Timeline::finish).
  struct GradSync {
    bool on = false;
    double pass = 0, reduce = 0, hidden = 0;
    int delay = 0;
  } sync{};
};

// Cost of one action. A fused backward (split_backward = false) costs backward + weight; an
// FB forward + backward (its halves back to back; the simulator applies fb_overlap).
double action_cost(const Schedule& s, ActionKind k, const OpCosts& c);

struct TimedAction {
  int index = 0;  // into schedule.actions[stage]
  double start = 0, end = 0;
  // An FB's halves: F in [start, f_end), B in [b_start, end). Equal to end otherwise.
  double f_end = 0, b_start = 0;
};

struct Timeline {
  std::vector<std::vector<TimedAction>> stages;  // every action that ran, in order
  std::vector<double> busy;                      // compute time per stage
  double makespan = 0;
  // When each stage is done: its last action, its grad syncs' passes and collectives
  // (OpCosts::sync); the last action's end when there is no sync.
  std::vector<double> finish;
  // Set when some stage could not finish: every remaining action waits on a receive whose
  // send never runs. `stuck` names each blocked stage's next action.
  bool deadlocked = false;
  std::string stuck;

  double idle(int stage) const { return makespan - busy[stage]; }
  double total_idle() const;
  double bubble() const;      // total_idle / (stages * makespan); 0 for an empty timeline
  double synced_end() const;  // the latest finish (at least the makespan)
};

Timeline simulate_schedule(const Schedule& s, const OpCosts& costs);
// Each stage with its own costs (costs[stage]; a send's latency is its sender's), so that
// uneven stages (the head on the last one, more blocks on some) show in the makespan.
// The planner times its candidates with this.
Timeline simulate_schedule(const Schedule& s, const std::vector<OpCosts>& costs);

// The bubble of an equal-cost run (F = B = W) where a closed form is known, else -1:
//   gpipe, 1f1b:  (p-1)/(m+p-1)      interleaved: (p-1)/(v*m+p-1)
// zb-h1 and dualpipev have none in these terms (their value is the simulator's).
double closed_form_bubble(ScheduleKind schedule, int p, int m, int v);

// The DualPipe paper's idle time per device for DualPipeV on p devices (PP = 2p stages of
// one chunk each): (PP/2 - 1)(F&B + B_full - 3W), with B_full = B + W the full backward of
// a chunk and F&B the time of an overlapped pair with its W, here F + B + W - fb_overlap *
// min(F, B) (costs per chunk). An estimate the simulator is compared against, not a bound.
double dualpipe_paper_idle(int p, const OpCosts& chunk_costs);

}  // namespace mt
