#include "train/progress.h"

#include <unistd.h>

#include <cmath>

#include "core/launcher.h"

namespace mt {

ProgressStyle resolve_progress(ProgressMode mode, bool stdout_is_terminal, bool launched) {
  switch (mode) {
    case ProgressMode::bar:
      return ProgressStyle::bar;
    case ProgressMode::lines:
      return ProgressStyle::lines;
    case ProgressMode::none:
      return ProgressStyle::none;
    case ProgressMode::automatic:
      break;
  }
  return stdout_is_terminal && !launched ? ProgressStyle::bar : ProgressStyle::lines;
}

Progress::Progress(ProgressStyle style, int every, bool quiet, bool silent)
    : style_(quiet || silent ? ProgressStyle::none : style),
      every_(every < 1 ? 1 : every),
      quiet_(quiet || silent),
      silent_(silent) {}

Progress Progress::for_run(const IoOptions& io, bool lead) {
  if (!lead) return Progress(ProgressStyle::none, 1, true, /*silent=*/true);
  const bool tty = isatty(fileno(stdout)) != 0;
  return Progress(resolve_progress(io.progress, tty, launcher_from_env().launched()), io.log_every,
                  io.quiet);
}

void Progress::step(const StepReport& r) {
  if (style_ == ProgressStyle::none) return;
  if (style_ == ProgressStyle::lines && r.step % every_ != 0 && r.step != r.steps) return;
  char stats[256];
  std::snprintf(stats, sizeof stats,
                "loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | mfu %.1f%% | %.0f ms", r.loss, r.lr,
                r.grad_norm, r.tokens_per_s, 100 * r.mfu, 1e3 * r.step_time_s);
  if (style_ == ProgressStyle::lines) {
    std::printf("step %d/%d | %s\n", r.step, r.steps, stats);
    std::fflush(stdout);
    return;
  }
  const int width = 24;
  const int filled = int(std::lround(double(width) * r.step / r.steps));
  std::string bar(size_t(filled), '#');
  bar.append(size_t(width - filled), '.');
  std::printf("\r\033[K[%s] %d/%d | %s", bar.c_str(), r.step, r.steps, stats);
  std::fflush(stdout);
  bar_drawn_ = true;
}

void Progress::clear_bar() {
  if (bar_drawn_) std::printf("\r\033[K");
  bar_drawn_ = false;
}

void Progress::line(const std::string& text) {
  if (quiet_) return;
  clear_bar();
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void Progress::warning(const std::string& text) {
  clear_bar();
  std::fflush(stdout);
  std::fprintf(stderr, "meshtrain: warning: %s\n", text.c_str());
}

void Progress::summary(const std::string& text) {
  if (silent_) return;
  clear_bar();
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void Progress::finish() {
  if (bar_drawn_) std::printf("\n");
  bar_drawn_ = false;
  std::fflush(stdout);
}

}  // namespace mt
