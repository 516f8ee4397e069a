#include "train/run_log.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "parallel/process_layout.h"
#include "schedule/schedule.h"
#include "train/weights_file.h"

namespace mt {

namespace {

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / (1024 * 1024));
  return buf;
}

}  // namespace

RunLog::RunLog(const Session& s)
    : s_(s),
      metrics_(s.lead() ? s.opts.io.metrics : "", s.start_step),
      progress_(Progress::for_run(s.opts.io, s.lead())),
      summary_(s.start_step + 1),
      first_step_(s.start_step + 1) {}

void RunLog::line(const std::string& text) {
  if (s_.lead()) progress_.line(text);
}

void RunLog::start(const std::string& backend) {
  const TrainOptions& o = s_.opts;
  const ParallelOptions& par = o.parallel;
  line(str("meshtrain: ", o.model.describe(), " | dp ", par.dp, " | tp ", par.tp,
           s_.sequence_parallel() ? " (sequence parallel)" : "", " | pp ", par.pp,
           par.pp > 1 ? str(" (", schedule_name(par.schedule), ")") : "", " | batch ",
           o.optim.batch, "x", o.model.seq, " | ", par.microbatches, " microbatch(es) | ",
           o.optim.recompute != Recompute::none
               ? str("recompute ", recompute_name(o.optim.recompute), " | ")
               : "",
           o.optim.precision != Precision::fp32
               ? str(precision_name(o.optim.precision), " (", s_.info.gemm_isa, ") | ")
               : "",
           o.model.experts > 0 ? str("experts ", s_.info.expert_gemm_isa, " | ") : "",
           o.optim.steps, " steps | backend ", backend,
           o.engine.ranks_per_process > 1
               ? str(" (", o.engine.ranks_per_process, " ranks per process)")
               : std::string(),
           par.dp_sync.kind != DpSync::Kind::every_step ? " | dp-sync " + dp_sync_text(par.dp_sync)
                                                        : std::string()));
  // The hybrid world: where each kind of group communicates (--print-layout has it all).
  if (o.engine.ranks_per_process > 1)
    line(summarize_process_layout(par.mesh(), o.engine.ranks_per_process));
  metrics_.write(run_record(backend));
}

// The run's description as the metrics file's first record: what the report page shows in
// its configuration table and needs to draw (the schedule for pp > 1).
nlohmann::json RunLog::run_record(const std::string& backend) const {
  const TrainOptions& o = s_.opts;
  const ParallelOptions& p = o.parallel;
  nlohmann::json model;
  for (const auto& [k, v] : config_metadata(o.model))
    if (k != "format") model[k] = v;
  nlohmann::json j = {{"event", "run"},
                      {"model", model},
                      {"layout",
                       {{"dp", p.dp},
                        {"tp", p.tp},
                        {"pp", p.pp},
                        {"ep", p.ep},
                        {"moe_overlap_parts", p.moe_overlap_parts},
                        {"cp", p.cp},
                        {"cp_comm", cp_comm_name(p.cp_comm)},
                        {"zero", p.zero},
                        {"microbatches", p.microbatches},
                        {"schedule", schedule_name(p.schedule)},
                        {"virtual_stages", p.virtual_stages},
                        {"sequence_parallel", s_.sequence_parallel()},
                        {"world", p.world()},
                        {"ranks_per_process", o.engine.ranks_per_process},
                        {"dp_sync", dp_sync_text(p.dp_sync)}}},
                      {"train",
                       {{"steps", o.optim.steps},
                        {"batch", o.optim.batch},
                        {"lr", o.optim.lr},
                        {"min_lr", o.optim.min_lr},
                        {"warmup", o.optim.warmup},
                        {"lr_schedule", lr_kind_name(o.optim.lr_schedule)},
                        {"weight_decay", o.optim.weight_decay},
                        {"grad_clip", o.optim.grad_clip},
                        {"seed", o.optim.seed},
                        {"threads", o.optim.threads},
                        {"recompute", recompute_name(o.optim.recompute)},
                        {"precision", precision_name(o.optim.precision)}}},
                      {"data", o.io.data},
                      {"backend", backend}};
  if (o.io.tokenizer) j["tokenizer"] = to_json(*o.io.tokenizer);
  if (o.io.data_bytes_per_token > 0) j["data_bytes_per_token"] = o.io.data_bytes_per_token;
  if (o.io.val_bytes_per_token > 0) j["val_bytes_per_token"] = o.io.val_bytes_per_token;
  return j;
}

void RunLog::write_report(bool last) {
  const IoOptions& io = s_.opts.io;
  if (!s_.lead() || io.report_page.empty() || !s_.info.write_report || !metrics_.is_regular_file())
    return;
  const int every = io.report_every;
  if (!last && (every == 0 || ++steps_since_report_ < every)) return;
  steps_since_report_ = 0;
  // The page is a view of the metrics, which are on disk whatever happens here: a page that
  // cannot be written costs a warning (once, and again at the end), never the run, its
  // checkpoints or its export.
  try {
    s_.info.write_report(io.metrics, io.report_page);
    report_warned_ = false;
  } catch (const std::exception& e) {
    if (report_warned_ && !last) return;
    report_warned_ = true;
    progress_.warning(str("report page not written: ", e.what()));
  }
}

void RunLog::moe_summary(int step) {
  for (const std::string& l : s_.moe_metrics.summary(step)) line(l);
}

void RunLog::step(const StepRecord& r) {
  const int steps = s_.opts.optim.steps;
  if (r.bubble) {
    // Step 1 warms up; it counts only when it is the run's only step.
    if (r.step > first_step_ || steps - s_.start_step == 1) bubble_sum_ += r.bubble->measured;
    if (r.step == first_step_)
      line(str("step ", r.step, ": pipeline bubble ", r.bubble->measured * 100, "% (theory ",
               r.bubble->theory * 100, "%)"));
  }
  if (r.val_loss) {
    line(str("step ", r.step, ": val_loss ", *r.val_loss,
             s_.opts.io.val_bytes_per_token > 0
                 ? str(" (", *r.val_loss / s_.opts.io.val_bytes_per_token, " per byte)")
                 : ""));
    moe_summary(r.step);
  }
  nlohmann::json j = to_json(r, s_.moe_metrics);
  // Per byte of text, so tokenizers compare: a token of an 8k BPE stands for ~4 bytes.
  const IoOptions& io = s_.opts.io;
  if (io.data_bytes_per_token > 0) j["loss_per_byte"] = r.loss / io.data_bytes_per_token;
  if (r.val_loss && io.val_bytes_per_token > 0) {
    j["val_loss_per_byte"] = *r.val_loss / io.val_bytes_per_token;
    j["val_bytes_per_token"] = io.val_bytes_per_token;
  }
  metrics_.write(j);
  summary_.step(r.step, r.loss, r.step_time_s, r.tokens_per_s, r.val_loss);
  write_report(false);
  progress_.step({r.step, steps, r.loss, r.lr, r.grad_norm, r.step_time_s, r.tokens_per_s, r.mfu});
}

void RunLog::memory(const std::vector<MemoryRecord>& records) {
  for (size_t r = 0; r < records.size(); ++r) metrics_.write(to_json(int(r), records[r]));
  const MemoryRecord& m = records[0];
  const ParallelOptions& par = s_.opts.parallel;
  line(str("memory per rank (rank 0, dp ", par.dp, ", tp ", par.tp,
           s_.sequence_parallel() ? " sp" : "", ", zero ", par.zero, "): params ",
           mib(m.params_bytes), ", grads ", mib(m.grads_bytes), ", optimizer ",
           mib(m.optimizer_bytes), ", activations ", mib(m.activations_peak_bytes),
           in_flight_text(m.microbatches_in_flight_peak)));
}

// What the executor's peak counts: whole microbatches, or under two or more chunks per
// stage (microbatch, chunk) pairs, each holding a chunk's share of the rank's layers. Under
// DualPipe-V the two chunks are the V's arms, its down and up halves of the layers.
std::string RunLog::in_flight_text(int64_t peak) const {
  if (!s_.pipelined()) return "";
  const ParallelOptions& p = s_.opts.parallel;
  const int v = chunks_per_stage(p.schedule, p.virtual_stages);
  if (v == 1) return str(" (", peak, " microbatches in flight)");
  if (p.schedule == ScheduleKind::dualpipev)
    return str(" (", peak,
               " (microbatch, chunk) pairs in flight on the V's down and up chunks, "
               "each half of the rank's layers)");
  return str(" (", peak, " (microbatch, chunk) pairs in flight, each 1/", v,
             " of the rank's layers)");
}

void RunLog::finish() {
  const TrainOptions& o = s_.opts;
  progress_.finish();
  write_report(true);
  if (!(s_.val && o.optim.eval_every > 0)) moe_summary(o.optim.steps);
  if (s_.pipelined()) {
    const int counted = std::max(1, o.optim.steps - s_.start_step - 1);
    line(str("pipeline bubble (", schedule_name(o.parallel.schedule), ", pp ", o.parallel.pp, ", ",
             o.parallel.microbatches, " microbatches): measured ", 100 * bubble_sum_ / counted,
             "% (mean over steps after the first), theory ", 100 * s_.runner->bubble_theory(),
             "%"));
  }
}

void RunLog::summary() {
  if (!s_.lead()) return;
  const IoOptions& io = s_.opts.io;
  const bool page = !io.report_page.empty() && s_.info.write_report && metrics_.is_regular_file();
  progress_.summary(summary_.line(s_.opts, page ? io.report_page : ""));
}

}  // namespace mt
