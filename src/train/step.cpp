#include "train/step.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"
#include "parallel/expert_parallel/router_balance.h"
#include "parallel/grad_norm.h"

namespace mt {

namespace {

SpanSink trace_sink(Trace& trace) {
  if (!trace.enabled()) return {};
  return [&trace](const std::string& name, const char* cat, double begin, double end) {
    trace.add(name, cat, begin, end);
  };
}

MicrobatchStats forward_backward(Session& s, Trace& trace) {
  const int B = s.opts.optim.batch, T = s.opts.model.seq;
  const float dloss = float(1.0 / (double(B) * T));  // mean over the global batch
  s.model.weights_changed();  // bf16 copies: converted once, at their first use this step
  s.dp.begin_step(s.opts.parallel.microbatches);
  s.moe_metrics.begin_step();
  const SpanSink sink = trace_sink(trace);
  if (s.dispatcher) s.dispatcher->set_span_sink(sink);
  s.model.set_span_sink(sink);  // --cp: the ring's steps on each rank's track
  MicrobatchStats stats = s.runner->run(s.train.inputs(0), s.train.targets(0), dloss, sink);
  s.model.set_span_sink({});
  return stats;
}

// Returns the gradient copies to leave out of the norm.
std::span<const float> finish_gradients(Session& s, Trace& trace) {
  Trace::Span span(trace, "wait grad buckets", "comm");
  s.dp.finish_gradients();
  // Gradients that cover this rank's rows only: norms under sequence parallelism, and the
  // MoE routers and experts under tp (their tokens are split, model/moe_layer.h).
  if (s.tp()) s.dp.reduce_tp_partial_grads(s.tp());
  return s.runner->finish_gradients();
}

struct LossAndNorm {
  double loss, norm;
};

// The global batch's mean loss and the gradient norm, each parameter counted once. The
// loss's sum over dp was issued before the gradient wait (train_step).
LossAndNorm loss_and_norm(Session& s, RankOrderSum& loss_sum, std::span<const float> copies) {
  const double tokens = double(s.opts.optim.batch) * s.opts.model.seq;
  const double loss = s.runner->sum_over_group(s.dp.finish_sum(loss_sum) / tokens);
  Communicator* pp = s.pipelined() ? s.ctx.pp.get() : nullptr;
  const double sq = global_grad_sum_squares(s.dp, {s.tp(), pp}, copies);
  return {loss, std::sqrt(sq)};
}

void check_finite(const Session& s, int step, const LossAndNorm& ln) {
  if (std::isfinite(ln.norm) && std::isfinite(ln.loss)) return;
  throw RuntimeError(str("step ", step, ": non-finite ",
                         std::isfinite(ln.loss) ? "gradient" : "loss", " (loss ", ln.loss,
                         ", grad norm ", ln.norm, "); try a lower --lr or a --grad-clip",
                         s.replica_sync.divergence_hint()));
}

// The DiLoCo outer step moves the weights after the optimizer's check: the ranks agree
// that it left them finite before a save or an export can write them.
void check_outer_step(Session& s, int step) {
  int64_t poisoned = s.replica_sync.outer_step_finite() ? 0 : 1;
  s.ctx.world->all_reduce(&poisoned, &poisoned, 1, DType::i64, ReduceOp::max).wait();
  if (poisoned)
    throw RuntimeError(str("step ", step, ": the DiLoCo outer step (--outer-lr ",
                           s.opts.parallel.outer_lr, ", --outer-momentum ",
                           s.opts.parallel.outer_momentum,
                           ") made the weights non-finite; not saving (the last checkpoint "
                           "written stays the newest; try a lower --outer-lr)"));
}

// torch.nn.utils.clip_grad_norm_'s coefficient, min(1, clip / (norm + 1e-6)), as the float
// the gradients are multiplied by. The optimizer applies it as it reads each gradient
// (AdamWParams::grad_scale): the same bits as scaling the gradients in place first, without
// the pass over them.
float clip_coefficient(const Session& s, double norm) {
  const double max_norm = s.opts.optim.grad_clip;
  if (max_norm <= 0) return 1.0f;
  return float(std::min(1.0, max_norm / (norm + 1e-6)));
}

// Whether every rank of the world updates the same elements from the same bits, so that
// each rank's own finiteness verdict is already every rank's: plain data parallelism at
// ZeRO 0 with a reduction at every step. Each rank holds all the weights and moments, and
// the gradient all-reduce leaves the same gradients on every rank (the premise the
// unreduced stage-0 gradient norm of parallel/grad_norm.h, and so the clip coefficient,
// already rests on). Anything else (ZeRO shards, tp / pp / cp ranks, experts split over
// ep, replicas stepping on their own gradients) updates different elements or values.
bool verdicts_agree_without_asking(const Session& s) {
  const ParallelOptions& p = s.opts.parallel;
  return s.dp.zero() == 0 && p.world() == p.dp && p.ep == 1 &&
         p.dp_sync.kind == DpSync::Kind::every_step;
}

void optimizer_step(Session& s, int step, double lr, float grad_scale, Trace& trace) {
  Trace::Span span(trace, "optimizer", "compute");
  // Each rank checks what it updated (the update reports it); the ranks agree before
  // anyone goes on, so a poisoned update ends every rank here, before a save or an export
  // can write it. Where the verdicts agree by construction the agreement is skipped: it
  // was a meeting point of every step, where one rank's hold-up stalled the others.
  const bool finite = s.opt.update(s.dp.param_storage(), s.dp.grad_storage(), lr, step, grad_scale);
  int64_t poisoned = finite ? 0 : 1;
  if (!verdicts_agree_without_asking(s))
    s.ctx.world->all_reduce(&poisoned, &poisoned, 1, DType::i64, ReduceOp::max).wait();
  if (poisoned)
    throw RuntimeError(str("step ", step,
                           ": non-finite weights after the update; not saving (the last "
                           "checkpoint written stays the newest; try a lower --lr)"));
  s.dp.after_optimizer();
  if (s.opts.model.router_bias_update > 0)
    for (MoeLayer* m : s.moe) update_router_bias(*m, s.ctx.dp.get());
}

struct CommCounters {
  CommStats dp, tp, cp, ep;
};

CommCounters comm_counters(const Session& s) {
  return {s.ctx.dp_cp->stats(), s.ctx.tp->stats(), s.ctx.cp ? s.ctx.cp->stats() : CommStats{},
          s.ctx.ep ? s.ctx.ep->stats() : CommStats{}};
}

GroupComm difference(const CommStats& after, const CommStats& before) {
  return {after.bytes_sent - before.bytes_sent, after.calls - before.calls,
          after.wait_seconds - before.wait_seconds};
}

void add_comm(StepRecord& r, Session& s, const CommCounters& before) {
  const CommCounters after = comm_counters(s);
  const uint64_t tp_bytes = after.tp.bytes_sent - before.tp.bytes_sent;
  r.comm_exposed_s = s.dp.take_exposed_seconds();
  r.comm_bytes = after.dp.bytes_sent - before.dp.bytes_sent + tp_bytes;
  if (s.opts.parallel.tp > 1) r.tp = difference(after.tp, before.tp);
  if (s.ctx.cp) r.cp = difference(after.cp, before.cp);
  if (s.opts.parallel.ep > 1) r.ep = difference(after.ep, before.ep);
}

// mfu, where the run reads it (train/mfu_peak.h). A peak still to be measured is measured
// at the end of the run's first step between two barriers of every rank (the same on every
// rank: options only): no rank computes beside the measurement, and under MPI, where each
// process measures its own, the next step starts together, not after the slowest's.
void add_rates(StepRecord& r, const Session& s, int step) {
  r.tokens_per_s = double(s.opts.optim.batch) * s.opts.model.seq / r.step_time_s;
  if (!run_reads_mfu(s.opts)) return;
  if (step == s.start_step + 1 && s.info.peak && s.info.peak->needs_measuring()) {
    s.ctx.world->barrier().wait();
    s.peak_flops();
    s.ctx.world->barrier().wait();
  }
  const double peak = s.peak_flops();
  r.mfu = peak > 0 ? s.opts.model.flops_per_token() * r.tokens_per_s / peak : 0;
}

}  // namespace

StepRecord train_step(Session& s, int step, Trace& trace) {
  StepRecord r;
  r.step = step;
  const double t_step = now_seconds();
  r.lr = s.lr.at(step - 1);
  s.train.next_batch();
  r.data_hash = s.train.batch_hash();
  s.model.set_dropout_step(uint64_t(step));
  const CommCounters before = comm_counters(s);

  double t = now_seconds();
  auto phase_end = [&t](double& seconds) {
    const double now = now_seconds();
    seconds = now - t;
    t = now;
  };
  s.replica_sync.before_step(s.dp, step);
  r.microbatches = forward_backward(s, trace);
  phase_end(r.phases.forward_backward);
  // Issued before the gradient wait, so that it is settled within it: the ranks meet once
  // here, not a second time right after (each meeting waits for the slowest rank).
  RankOrderSum loss_sum = s.dp.issue_sum_over(r.microbatches.loss_sum);
  const std::span<const float> copies = finish_gradients(s, trace);
  s.replica_sync.local_gradients(s.dp, step);
  phase_end(r.phases.gradients);
  const LossAndNorm ln = loss_and_norm(s, loss_sum, copies);
  check_finite(s, step, ln);
  const float clip = clip_coefficient(s, ln.norm);
  phase_end(r.phases.norm_and_clip);
  optimizer_step(s, step, r.lr, clip, trace);
  // --dp-sync: the replicas' weights averaged when due, all of it exposed communication.
  const double t_sync = now_seconds();
  const bool synced = s.replica_sync.after_step(s.dp, step);
  // The update wrote the bf16 weight copies; they are current unless --dp-sync moved the
  // weights after it.
  if (!synced) s.bf16_copies.written();
  if (synced && s.replica_sync.takes_outer_steps()) check_outer_step(s, step);
  const double sync_seconds = synced ? now_seconds() - t_sync : 0;
  phase_end(r.phases.optimizer);

  r.loss = ln.loss;
  r.grad_norm = ln.norm;
  add_comm(r, s, before);
  r.comm_exposed_s += sync_seconds;
  r.step_time_s = now_seconds() - t_step;
  trace.add("step " + std::to_string(step), "step", t_step, now_seconds());
  add_rates(r, s, step);
  // Collective, every rank and every step: the bubble over the world, routing over dp/pp.
  r.bubble = s.runner->bubble(r.microbatches);
  s.moe_metrics.reduce();
  return r;
}

}  // namespace mt
