#include "kernels/phase_profile.h"

#include "core/timer.h"

namespace mt {

namespace {

struct ThreadProfile {
  PhaseTotals* totals = nullptr;
  int depth = 0;  // open scopes; only the outermost one records
};

ThreadProfile& thread_profile() {
  thread_local ThreadProfile p;
  return p;
}

}  // namespace

const char* phase_name(Phase p) {
  static const char* kNames[kPhases] = {"gemm",      "attention",  "norm",      "activation",
                                        "optimizer", "conversion", "embedding", "permutation"};
  return kNames[int(p)];
}

PhaseTotals* attached_phase_totals() {
  return thread_profile().totals;
}

void attach_phase_totals(PhaseTotals* totals) {
  thread_profile().totals = totals;
}

PhaseScope::PhaseScope(Phase p, double flops, double bytes) : totals_(nullptr), phase_(p) {
  ThreadProfile& tp = thread_profile();
  if (!tp.totals || tp.depth++ > 0) return;
  totals_ = tp.totals;
  const int i = int(p);
  totals_->flops[i] += flops;
  totals_->bytes[i] += bytes;
  totals_->calls[i] += 1;
  // The cpu readings sit inside the wall ones, so a phase's cpu never exceeds its wall time.
  begin_ = now_seconds();
  begin_cpu_ = thread_cpu_seconds();
}

PhaseScope::~PhaseScope() {
  ThreadProfile& tp = thread_profile();
  if (!tp.totals) return;
  --tp.depth;
  if (!totals_) return;
  totals_->cpu_seconds[int(phase_)] += thread_cpu_seconds() - begin_cpu_;
  totals_->seconds[int(phase_)] += now_seconds() - begin_;
}

}  // namespace mt
