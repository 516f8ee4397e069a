// What a person watching the run sees (global rank 0): a progress bar that redraws in
// place on a terminal, plain per-step lines otherwise (logs, CI), and one summary line at
// the end, which --quiet keeps.
//
// --progress auto draws the bar only when stdout is a terminal and no launcher started the
// process: Open MPI gives every rank a pseudo-terminal, so under `mpirun ... > log` the bar's
// carriage returns and erase codes would fill the log (issue #31). Lines come every
// --log-every steps and at the last.
#pragma once

#include <cstdio>
#include <string>

#include "train/options.h"

namespace mt {

struct StepReport {
  int step, steps;
  double loss, lr, grad_norm, step_time_s, tokens_per_s, mfu;
};

// What is drawn for each step, resolved once.
enum class ProgressStyle { bar, lines, none };
ProgressStyle resolve_progress(ProgressMode mode, bool stdout_is_terminal, bool launched);

class Progress {
 public:
  // quiet: nothing but warnings and the summary. A silent Progress (other ranks) prints
  // nothing at all.
  Progress(ProgressStyle style, int every, bool quiet, bool silent = false);
  // For this process: its stdout and its launcher decide `auto`.
  static Progress for_run(const IoOptions& io, bool lead);
  void step(const StepReport& r);
  // A line that must stay on screen (eval results, summaries): clears the bar first.
  void line(const std::string& text);
  // "meshtrain: warning: TEXT" on stderr, shown under --quiet too: clears the bar first.
  void warning(const std::string& text);
  // The run's last line, shown under --quiet too.
  void summary(const std::string& text);
  void finish();

 private:
  void clear_bar();

  ProgressStyle style_;
  int every_;
  bool quiet_, silent_;
  bool bar_drawn_ = false;
};

}  // namespace mt
