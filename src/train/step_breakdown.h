// `meshtrain bench step --breakdown`: where one rank's training step goes, phase by phase
// (kernels/phase_profile.h), next to each phase's roofline time: GEMM and attention FLOPs
// at the precision's GEMM peak (the `mfu` denominator, Session::peak_flops), memory-bound
// phases' bytes at the copy bandwidth of this thread, measured at the end of the run. What
// the kernels do not cover is "comm wait" (the compute thread blocked on dp, tp and cp
// communication, as the step record counts it) and "framework" (the rest: the runner,
// buffers, the loss and norm bookkeeping, time between kernels).
//
// Each phase also gets its cpu time: the rank thread's own CPU time in the phase's scopes,
// and the step's cpu time is that thread's between two steps' ends. On a loaded machine the
// wall columns grow with the time the thread waited for a core; the cpu columns do not,
// so they read about what a quiet machine's wall columns would (with --threads 1: a
// wider team's other threads are not counted). A rank spinning on communication burns
// cpu, so "framework" cpu includes such spins.
//
// The first step is a warm-up (oneDNN builds its primitives there) and is not counted.
#pragma once

#include <string>
#include <vector>

#include "kernels/phase_profile.h"
#include "train/step.h"

namespace mt {

struct Session;
class Communicator;

class StepBreakdown {
 public:
  explicit StepBreakdown(bool enabled) : enabled_(enabled) {}
  ~StepBreakdown();
  StepBreakdown(const StepBreakdown&) = delete;
  StepBreakdown& operator=(const StepBreakdown&) = delete;

  // After each step: starts counting after the first one, then adds the step's times.
  void after_step(const StepRecord& r);
  // The table (empty when not enabled or no step was counted).
  std::string table(const Session& s) const;
  // One line per rank of the world (its step, forward+backward, comm wait and thread cpu
  // per step, and the medians of its steps and waits), so a rank that is slower than its
  // peers, or waits for them, shows, and so does a mean that a few stalled steps make (the
  // table's columns are means); every rank calls it (an all-gather), rank 0 gets the
  // lines, the others an empty string.
  std::string rank_lines(Communicator& world) const;

 private:
  bool enabled_;
  bool counting_ = false;
  int steps_ = 0;
  double step_s_ = 0, comm_wait_s_ = 0, forward_backward_s_ = 0;
  double step_cpu_s_ = 0, last_cpu_s_ = 0;  // the thread's cpu time: counted steps, last end
  std::vector<double> step_each_s_, comm_wait_each_s_;  // counted steps, for the medians
  PhaseTotals totals_;
};

// Bytes per second one thread copies (memcpy of a buffer well beyond the caches; the best
// of a few runs, as the GEMM peaks are measured).
double measure_copy_bandwidth(double seconds_budget);

}  // namespace mt
