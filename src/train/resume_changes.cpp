#include "train/resume_changes.h"

#include <cstdio>

#include "core/error.h"
#include "train/hf_config.h"
#include "train/lr_schedule.h"

namespace mt {

namespace {

// The flags that set the learning-rate schedule (docs/contracts.md §2).
bool shapes_the_schedule(const std::string& flag) {
  return flag == "steps" || flag == "lr" || flag == "min-lr" || flag == "warmup" ||
         flag == "lr-schedule";
}

std::string lr_text(double lr) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", lr);
  return buf;
}

// What a schedule change does to the next update: the step the cosine now ends at (a longer
// run re-stretches it) and the lr the first resumed step takes.
std::string schedule_note(const ConfigChange& c, const TrainOptions& now, int start) {
  const OptimOptions& t = now.optim;
  const LrSchedule lr{t.lr_schedule, t.lr, t.min_lr, t.warmup, t.steps};
  std::string note = " (";
  if (c.flag == "steps" && t.lr_schedule == LrKind::cosine)
    note += str("the cosine schedule now ends at step ", t.steps, "; ");
  return note + str("lr at step ", start + 1, " is ", lr_text(lr.at(start)), ")");
}

// A shape flag whose value, as the model uses it, differs: the checkpoint's tensors have
// the recorded shape, so the run cannot be this one resumed.
void refuse_shape_change(const ConfigChange& c, const TrainOptions& recorded,
                         const TrainOptions& now, const std::string& dir) {
  std::optional<std::string> before = shape_flag_text(c.flag, recorded.model);
  std::optional<std::string> after = shape_flag_text(c.flag, now.model);
  // Learned positions: the checkpoint's position table has --seq rows.
  if (c.flag == "seq" && !recorded.model.llama()) before = c.before, after = c.after;
  if (!before || *before == *after) return;
  throw UsageError(str("--", c.flag, " ", *after, " contradicts the checkpoint ", dir,
                       ", whose model has --", c.flag, " ", *before,
                       ": a resumed run keeps its model's shape; drop the flag (or start a new run "
                       "from its weights with --init-from)"));
}

// The checkpoint's data position counts draws of the recorded order (shuffled: samples of
// --seed's per-epoch permutation; sequential: the token offset): in another order, or another
// seed's permutation, it would repeat some samples of the epoch and skip others without a
// word, so the order is part of the run resumed.
void refuse_order_change(const ConfigChange& c, const TrainOptions& recorded,
                         const std::string& dir) {
  const bool shuffled = recorded.io.data_order == DataOrder::shuffled;
  if (c.flag != "data-order" && !(c.flag == "seed" && shuffled)) return;
  const char* what = c.flag == "seed" ? "the seed of its shuffled order" : "its data order";
  throw UsageError(str("--", c.flag, " ", c.after, " contradicts the checkpoint ", dir,
                       ", whose run has --", c.flag, " ", c.before, ": its data position counts ",
                       shuffled ? "draws of that shuffled order" : "tokens of the sequential order",
                       ", so a resumed run keeps ", what,
                       " (another would repeat and skip samples); drop the flag, or start a new "
                       "run from its weights with --init-from"));
}

}  // namespace

std::vector<std::string> resume_change_lines(const std::vector<ConfigChange>& changes,
                                             const TrainOptions& recorded, const TrainOptions& now,
                                             int start_step, const std::string& dir) {
  for (const ConfigChange& c : changes) {
    refuse_shape_change(c, recorded, now, dir);
    refuse_order_change(c, recorded, dir);
  }
  std::vector<std::string> lines;
  for (const ConfigChange& c : changes) {
    // A shape flag repeating the recorded shape in other words (--kv-heads 0 for --heads).
    if (shape_flag_text(c.flag, now.model)) continue;
    std::string line = str("resumed from step ", start_step, " of ", dir, "; changed: --", c.flag,
                           " ", c.before, " -> ", c.after);
    if (shapes_the_schedule(c.flag)) line += schedule_note(c, now, start_step);
    lines.push_back(line);
  }
  return lines;
}

}  // namespace mt
