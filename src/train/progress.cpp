#include "train/progress.h"

#include <unistd.h>

#include <cmath>

namespace mt {

Progress::Progress(bool quiet) : quiet_(quiet), tty_(isatty(fileno(stdout)) != 0) {}

void Progress::step(const StepReport& r) {
  if (quiet_) return;
  char stats[256];
  std::snprintf(stats, sizeof stats,
                "loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | mfu %.1f%% | %.0f ms", r.loss, r.lr,
                r.grad_norm, r.tokens_per_s, 100 * r.mfu, 1e3 * r.step_time_s);
  if (!tty_) {
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

void Progress::line(const std::string& text) {
  if (quiet_) return;
  if (bar_drawn_) std::printf("\r\033[K");
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  bar_drawn_ = false;
}

void Progress::warning(const std::string& text) {
  if (bar_drawn_) std::printf("\r\033[K");
  std::fflush(stdout);
  bar_drawn_ = false;
  std::fprintf(stderr, "meshtrain: warning: %s\n", text.c_str());
}

void Progress::finish() {
  if (bar_drawn_) std::printf("\n");
  bar_drawn_ = false;
  std::fflush(stdout);
}

}  // namespace mt
