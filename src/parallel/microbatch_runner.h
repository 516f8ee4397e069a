// How one rank runs the microbatches of an optimizer step. Two implementations: the plain
// loop (every microbatch forward + backward in turn: one worker, dp, tp, ep) and the
// pipeline runner (pipeline/pipeline_runner.h: the stage's schedule over the pp group). The
// trainer's step is the same sequence for both; what only a pipeline has (the tied
// embedding's copies on two stages, a loss held by the last stage, a bubble to measure)
// lives behind this interface.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>

namespace mt {

// Receives each compute or communication span the runner records: name (PyTorch-style
// for pipeline actions: "1F3", "0B2", ...; "F+B mb0" for the plain loop), category
// ("compute" or "comm") and [begin, end) in seconds on the steady clock (core/timer.h).
// Trace::add has this signature.
using SpanSink =
    std::function<void(const std::string& name, const char* cat, double begin, double end)>;

// What one run of the microbatches produced on this rank.
struct MicrobatchStats {
  double loss_sum = 0;     // summed token cross-entropy (a pipeline: the last stage's; 0 elsewhere)
  int peak_in_flight = 1;  // microbatches holding activations at once
  double busy_seconds = 0;  // inside compute (a pipeline's F, B, W)
  double step_seconds = 0;  // the whole run
};

struct BubbleMeasure {
  double measured = 0;  // idle / step time, averaged over the ranks (docs/contracts.md §6)
  double theory = 0;    // the schedule's with F = B = W
};

class MicrobatchRunner {
 public:
  virtual ~MicrobatchRunner() = default;

  // Forward + backward of the rank's m microbatches of one global batch: tokens and targets
  // are (m * b, T) int32, microbatch j at row j * b. dloss scales the loss gradient (1 /
  // tokens of the global batch). Gradients accumulate into the model's gradient storage,
  // where a data-parallel engine's hooks pick them up.
  virtual MicrobatchStats run(const int* tokens, const int* targets, float dloss,
                              const SpanSink& sink) = 0;

  // Forward only (evaluation) of the same microbatches: the summed token cross-entropy
  // this rank computed (0 where no loss is computed).
  virtual double evaluate(const int* tokens, const int* targets) = 0;

  // After the data-parallel reduction: combine gradients that several ranks of the runner's
  // group hold as copies of one tensor, so that every copy gets the same update (a
  // pipeline's tied embedding). Returns this rank's gradient elements that are a copy of
  // ones counted on another rank, for the global norm to leave out (grad_norm.h); valid
  // until the next call.
  virtual std::span<const float> finish_gradients() { return {}; }

  // A value whose parts lie on several ranks of the runner's group (a loss, a norm) summed
  // over it; the identity for the plain loop. Collective over the group.
  virtual double sum_over_group(double x) { return x; }

  // The measured and theoretical bubble of a run; none for the plain loop. Collective over
  // the world.
  virtual std::optional<BubbleMeasure> bubble(const MicrobatchStats&) { return std::nullopt; }
  // The schedule's bubble with F = B = W (0 for the plain loop).
  virtual double bubble_theory() const { return 0; }
};

}  // namespace mt
