#include "parallel/pipeline/pipeline_runner.h"

#include "comm/rank_order_sum.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "parallel/pipeline/tied_embedding.h"

namespace mt {

namespace {

std::vector<ModelChunk*> chunks_of(GPT& model) {
  std::vector<ModelChunk*> mine;
  for (int c = 0; c < model.num_chunks(); ++c) mine.push_back(&model.chunk(c));
  return mine;
}

}  // namespace

PipelineRunner::PipelineRunner(GPT& model, DataParallel& dp, const ParallelContext& ctx,
                               Schedule schedule, PipelineShape shape)
    : dp_(dp),
      table_(model.table()),
      tied_name_(model.config().tied() ? model.config().token_table_name() : ""),
      ctx_(ctx),
      ends_on_one_stage_(schedule.stage_of(0) == schedule.stage_of(schedule.model_chunks() - 1)),
      bubble_theory_(theoretical_bubble(schedule)) {
  executor_ = std::make_unique<PipelineExecutor>(std::move(schedule), ctx.coord.pp,
                                                 chunks_of(model), *ctx.pp, shape);
}

MicrobatchStats PipelineRunner::run(const int* tokens, const int* targets, float dloss,
                                    const SpanSink& sink) {
  const PipelineStepStats ps = executor_->run(tokens, targets, dloss, sink);
  MicrobatchStats st;
  st.loss_sum = ps.loss_sum;
  st.peak_in_flight = ps.peak_in_flight;
  st.busy_seconds = ps.busy_seconds;
  st.step_seconds = ps.step_seconds;
  return st;
}

double PipelineRunner::evaluate(const int* tokens, const int* targets) {
  return executor_->evaluate(tokens, targets);
}

std::span<const float> PipelineRunner::finish_gradients() {
  // DualPipeV's V holds the embedding and the head on stage 0: one wte, its two uses
  // summed in place (data_parallel.h), nothing to exchange.
  if (ends_on_one_stage_ || (!ctx_.first_stage() && !ctx_.last_stage())) return {};
  // Both copies of the tied wte get the sum of the embedding's and the head's parts; the
  // last stage's is a copy of the first stage's, counted there in the norm.
  sum_tied_embedding_grad(*ctx_.pp, dp_, table_, tied_name_, tied_grad_);
  return tied_embedding_copy(*ctx_.pp, tied_grad_);
}

double PipelineRunner::sum_over_group(double x) {
  return sum_in_rank_order(*ctx_.pp, x);
}

std::optional<BubbleMeasure> PipelineRunner::bubble(const MicrobatchStats& st) {
  // Idle / step time of the schedule, averaged over every rank (docs/contracts.md §6).
  return BubbleMeasure{pipeline_bubble(*ctx_.world, st.busy_seconds, st.step_seconds),
                       bubble_theory_};
}

}  // namespace mt
