#include "train/trainer.h"

#include <cstdio>

#include "comm/fault.h"
#include "train/checkpoint/checkpointer.h"
#include "train/evaluate.h"
#include "train/run_log.h"
#include "train/session_io.h"
#include "train/step.h"
#include "train/step_breakdown.h"
#include "train/trace.h"

namespace mt {

namespace {

bool eval_step(const Session& s, int step) {
  const OptimOptions& t = s.opts.optim;
  return s.val && t.eval_every > 0 && (step % t.eval_every == 0 || step == t.steps);
}

bool save_step(const Session& s, int step) {
  const IoOptions& io = s.opts.io;
  return !io.save.empty() && io.save_every > 0 && step % io.save_every == 0 &&
         step != s.opts.optim.steps;
}

}  // namespace

void train_rank(const TrainOptions& o, CommWorld& world, const RunInfo& info) {
  std::unique_ptr<Session> session = build_session(o, world, info);
  Session& s = *session;
  const std::unique_ptr<Checkpointer> checkpoints = make_checkpointer(s, world);
  restore_session(s);
  const FaultSpec fault = fault_spec_from_env();
  RunLog log(s);
  Trace trace(!o.io.trace.empty(), world.rank(), info.t0);
  log.start(world.backend_name());
  StepBreakdown breakdown(o.engine.breakdown);

  for (int step = s.start_step + 1; step <= o.optim.steps; ++step) {
    maybe_inject_fault(fault, world.rank(), step, world);
    checkpoints->check();  // a failed background save stops the run here
    StepRecord r = train_step(s, step, trace);
    breakdown.after_step(r);
    if (eval_step(s, step)) r.val_loss = evaluate(s);
    log.step(r);
    if (step == s.start_step + 1) log.memory(gather_memory_records(s, r.microbatches));
    if (save_step(s, step)) checkpoints->save(step);
  }
  log.finish();
  const std::string rank_lines = breakdown.rank_lines(*s.ctx.world);  // collective
  if (world.rank() == 0) std::fputs((breakdown.table(s) + rank_lines).c_str(), stdout);
  if (const std::string line = checkpoints->finish(o.optim.steps); !line.empty()) log.line(line);
  write_final_outputs(s, [&](const std::string& l) { log.line(l); });
  if (!o.io.trace.empty()) trace.write(*s.ctx.world, o.io.trace);
  log.summary();
  s.ctx.world->barrier().wait();
}

}  // namespace mt
