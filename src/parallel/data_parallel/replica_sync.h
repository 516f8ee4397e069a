// How often data-parallel replicas synchronise (--dp-sync), for links too slow to reduce
// the gradients at every step:
//
//   every-step  synchronous data parallelism (the default): gradients averaged every step
//   local:H     local SGD: the replicas step on their own gradients (each the mean over its
//               own share of the batch); every H-th step is a synchronous step, after which
//               the parameters are averaged, so every replica starts the next period from
//               the same weights. local:1 has no local steps and is every-step exactly.
//   diloco:H    DiLoCo: H local steps, then the replicas' parameters are averaged and the
//               change since the last synchronisation (the "outer gradient", anchor minus
//               average) is applied to the anchor by Nesterov momentum SGD (--outer-lr,
//               --outer-momentum); every replica continues from the new anchor.
//
// The last step of a run always synchronises, so exports and samples see one model. Each
// replica keeps its own AdamW moments. ZeRO 0 only, no experts, no checkpoints (checked
// before ranks start: the anchor and outer momentum are not saved).
#pragma once

#include <string>
#include <vector>

#include "parallel/data_parallel/data_parallel.h"

namespace mt {

struct DpSync {
  enum class Kind { every_step, local, diloco } kind = Kind::every_step;
  int period = 1;  // H
  bool operator==(const DpSync&) const = default;
};

// Parses "every-step", "local:H" or "diloco:H" (H >= 1); false if malformed.
bool parse_dp_sync(const std::string& text, DpSync* out);
// parse_dp_sync for the flag's text: UsageError `--dp-sync must be every-step, local:H or
// diloco:H with H >= 1 (got 'x')` if malformed.
DpSync dp_sync_from_flag(const std::string& text);
// The text parse_dp_sync reads back: "every-step", "local:4", "diloco:16".
std::string dp_sync_text(const DpSync& d);

// DiLoCo's outer step on n floats: delta = anchor - average; v = mu v + delta;
// anchor -= lr (delta + mu v) (Nesterov); weights = anchor. Returns whether the new anchor
// and momentum are finite (an --outer-lr too large overflows them).
bool diloco_outer_step(float* anchor, float* momentum, float* weights, size_t n, float lr,
                       float mu);

class ReplicaSync {
 public:
  ReplicaSync(const DpSync& mode, double outer_lr, double outer_momentum, int last_step);

  bool enabled() const { return mode_.kind != DpSync::Kind::every_step; }
  bool takes_outer_steps() const { return mode_.kind == DpSync::Kind::diloco; }
  // Whether step (1-based) keeps its gradients local (no dp reduction).
  bool local_step(int step) const;
  // Before the step's forward pass: tells the reducer.
  void before_step(DataParallel& dp, int step);
  // After finish_gradients on a local step: the gradient of this replica's own mean loss
  // (the reducer's 1/(global batch) scaling covered 1/dp of it).
  void local_gradients(DataParallel& dp, int step);
  // After the optimizer: averages (and for DiLoCo, takes the outer step) when due.
  // Collective over dp. Returns true if it synchronised.
  bool after_step(DataParallel& dp, int step);
  // Whether this rank's last outer step left finite weights. The caller agrees on it over
  // the world after a synchronising step, before anything can save the weights: the outer
  // step runs after the optimizer's own finiteness check.
  bool outer_step_finite() const { return outer_finite_; }
  // For a divergence message: under DiLoCo, where the outer step (--outer-lr) last moved the
  // weights; "" otherwise.
  std::string divergence_hint() const;

 private:
  bool sync_due(int step) const { return step % mode_.period == 0 || step == last_step_; }

  DpSync mode_;
  double outer_lr_, outer_momentum_;
  int last_step_;
  int local_since_sync_ = 0;
  int last_outer_step_ = 0;
  bool outer_finite_ = true;
  std::vector<float> anchor_, momentum_;  // DiLoCo, this rank's parameters (ZeRO 0: all)
};

}  // namespace mt
