// What a run tells the outside world, from global rank 0: the start-up line, per-step
// metrics (JSONL, docs/contracts.md §6) and progress, evaluation and routing summaries, the
// memory records after the first step and the pipeline bubble at the end. Other ranks
// hold a silent one.
#pragma once

#include <string>
#include <vector>

#include "train/metrics.h"
#include "train/progress.h"
#include "train/records.h"
#include "train/run_summary.h"
#include "train/session.h"
#include "train/step.h"

namespace mt {

class RunLog {
 public:
  explicit RunLog(const Session& s);

  void start(const std::string& backend);
  // After each step (val_loss set on evaluation steps).
  void step(const StepRecord& r);
  // After the first step: every rank's record (gather_memory_records).
  void memory(const std::vector<MemoryRecord>& records);
  // After the last step.
  void finish();
  // A line that must stay on screen (rank 0 only).
  void line(const std::string& text);
  // The run's last line, after every output is written; printed under --quiet too.
  void summary();

 private:
  void moe_summary(int step);
  nlohmann::json run_record(const std::string& backend) const;
  // " (N microbatches in flight)" after the memory line, in the schedule's own unit.
  std::string in_flight_text(int64_t peak) const;
  // The report page beside --metrics: every --report-every steps, and when `last`.
  void write_report(bool last);

  const Session& s_;
  MetricsWriter metrics_;
  Progress progress_;
  RunSummary summary_;
  int first_step_;  // the first step this run takes (after a --load)
  double bubble_sum_ = 0;
  int steps_since_report_ = 0;
  bool report_warned_ = false;  // the last attempt failed and said so
};

}  // namespace mt
