// What a person watching the run sees (global rank 0): a progress bar that redraws in
// place on a terminal, plain per-step lines otherwise (logs, CI).
#pragma once

#include <cstdio>
#include <string>

namespace mt {

struct StepReport {
  int step, steps;
  double loss, lr, grad_norm, step_time_s, tokens_per_s, mfu;
};

class Progress {
 public:
  explicit Progress(bool quiet);
  void step(const StepReport& r);
  // A line that must stay on screen (eval results, summaries): clears the bar first.
  void line(const std::string& text);
  // "meshtrain: warning: TEXT" on stderr, shown under --quiet too: clears the bar first.
  void warning(const std::string& text);
  void finish();

 private:
  bool quiet_, tty_;
  bool bar_drawn_ = false;
};

}  // namespace mt
