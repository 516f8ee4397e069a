#include "parallel/pipeline/pipeline_runner.h"

#include "comm/rank_order_sum.h"
#include "kernels/reduce.h"
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
    : dp_(dp), table_(model.table()), ctx_(ctx), bubble_theory_(theoretical_bubble(schedule)) {
  const int m = schedule.microbatches;
  executor_ = std::make_unique<PipelineExecutor>(std::move(schedule), ctx.coord.pp,
                                                 chunks_of(model), *ctx.pp, shape);
  // Data parallelism reduces once, when the last microbatch's weight gradients are done.
  // Per chunk: with interleaving one chunk's last backward precedes another's earlier ones.
  executor_->set_before_weight_grads(
      [this, m](int mb, int c) { dp_.begin_microbatch(mb == m - 1, c); });
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

double PipelineRunner::finish_gradients() {
  if (!ctx_.first_stage() && !ctx_.last_stage()) return 0;
  // Both copies of the tied wte get the sum of the embedding's and the head's parts.
  std::vector<float> tied;
  sum_tied_embedding_grad(*ctx_.pp, dp_, table_, tied);
  // The last stage's wte is a copy of the first stage's: its part of the norm is counted
  // there. Under tp each rank holds a slice of it.
  if (!ctx_.last_stage()) return 0;
  const double own = sum_squares(tied.data(), tied.size());
  return ctx_.tp && ctx_.tp->size() > 1 ? sum_in_rank_order(*ctx_.tp, own) : own;
}

double PipelineRunner::sum_over_group(double x) {
  return sum_in_rank_order(*ctx_.pp, x);
}

std::optional<BubbleMeasure> PipelineRunner::bubble(const MicrobatchStats& st) {
  // Idle / step time of the schedule, averaged over every rank (CONTRACTS.md §6).
  return BubbleMeasure{pipeline_bubble(*ctx_.world, st.busy_seconds, st.step_seconds),
                       bubble_theory_};
}

}  // namespace mt
