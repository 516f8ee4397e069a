// The optimizer update of some units deferred to their first use in the next step's forward
// (issue #33: weak scaling in bf16).
//
// Why. Under plain data parallelism every rank leaves the gradient all-reduce at the same
// moment and runs the whole AdamW pass at once; the pass streams the fp32 weights, both
// moments and the gradients (~30 bytes a parameter) and is bound by the memory path the
// two cores share, so at dp 2 it took ~1.2 ms longer than at dp 1 (docs/performance.md,
// "stop 44" and "stop 45"). Here the ranks of odd dp index update only the edge unit
// (embedding, final LayerNorm, head) at once, and each block's unit just before the next
// forward first uses it: their streaming then runs beside the even ranks' forward GEMMs
// (compute-bound), not beside the even ranks' AdamW.
//
// Bits. Each element's update depends on that element's weight, moments and gradient and
// on the step's scalars (lr, step, clip coefficient) only: those are kept, and the
// gradients are left in place (DataParallel::keep_grads) until the deferred update has
// read them, so the weights, moments and bf16 copies are bit for bit those of the update
// at the step's end. Each deferred part checks its own finiteness; the even ranks' whole
// update has the same verdict (the premise of verdicts_agree_without_asking, step.cpp)
// and stops the run at the step's end.
//
// When. Only where a rank's verdict is every rank's (ZeRO 0, no tp / pp / cp / ep, a dp
// reduction at every step), without experts, at dp >= 2 on odd dp ranks, and only for a
// step followed by another training step (train_step's `defer_ok`): never before a save,
// an export or the end of the run, which read the weights outside a forward, nor before an
// evaluation (whose forward would apply it through the same hook; left out to be plain).
#pragma once

#include <vector>

#include "parallel/data_parallel/data_parallel.h"
#include "train/optimizer.h"

namespace mt {

class DeferredUpdate {
 public:
  // enabled: this rank defers (the conditions above, decided by the session). Installs
  // DataParallel's use hook when enabled.
  DeferredUpdate(DataParallel& dp, AdamW& opt, bool enabled);
  DeferredUpdate(const DeferredUpdate&) = delete;
  DeferredUpdate& operator=(const DeferredUpdate&) = delete;

  bool enabled() const { return enabled_; }
  // The step's update: all of it now, or (enabled and defer) the edge unit now and every
  // block's unit at its first use. Returns the verdict of what it updated now.
  [[nodiscard]] bool update(double lr, int step, float grad_scale, bool defer);
  // Whether every deferred part has been applied (after the next forward: a check).
  bool settled() const;

 private:
  void apply(int unit);  // the use hook: the unit's deferred part, if pending

  DataParallel& dp_;
  AdamW& opt_;
  bool enabled_;
  std::vector<AdamW::TableSpan> spans_;  // per unit: its table range
  AdamW::TableSpan blocks_{0, 0};        // the block units' ranges, end to end
  std::vector<char> pending_;            // per unit
  double lr_ = 0;
  int step_ = 0;
  float scale_ = 1;
};

}  // namespace mt
