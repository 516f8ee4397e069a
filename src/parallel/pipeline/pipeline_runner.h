// The pipeline as a microbatch runner (microbatch_runner.h): this stage's schedule over the
// pp group, with what only a pipeline has — the tied embedding's two copies (first and last
// stage) summed after the data-parallel reduction (one copy on stage 0 under DualPipeV's V),
// a loss that only the head's stage computes, forward-only evaluation through every stage,
// and the measured bubble.
#pragma once

#include <memory>
#include <vector>

#include "model/gpt.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/microbatch_runner.h"
#include "parallel/parallel_context.h"
#include "parallel/pipeline/executor.h"

namespace mt {

class PipelineRunner final : public MicrobatchRunner {
 public:
  // model: this stage's chunks; schedule: make_schedule's for (pp, microbatches, virtual
  // stages); shape: one boundary tensor (row_split = tp under sequence parallelism).
  PipelineRunner(GPT& model, DataParallel& dp, const ParallelContext& ctx, Schedule schedule,
                 PipelineShape shape);
  MicrobatchStats run(const int* tokens, const int* targets, float dloss,
                      const SpanSink& sink) override;
  double evaluate(const int* tokens, const int* targets) override;
  std::span<const float> finish_gradients() override;
  double sum_over_group(double x) override;
  std::optional<BubbleMeasure> bubble(const MicrobatchStats& st) override;
  double bubble_theory() const override { return bubble_theory_; }

 private:
  DataParallel& dp_;
  const ParamTable& table_;
  std::string tied_name_;  // the tied token table, or empty (untied llama)
  const ParallelContext& ctx_;
  bool ends_on_one_stage_;  // the embedding and the head on one stage (DualPipeV)
  double bubble_theory_;
  std::unique_ptr<PipelineExecutor> executor_;
  std::vector<float> tied_grad_;  // the tied wte's summed gradient (first and last stage)
};

}  // namespace mt
