// How --calibrate times a kernel: the best of repeated runs within a share of the time
// budget (the run least disturbed by other load), optionally with the caches emptied first.
#pragma once

#include <algorithm>
#include <vector>

#include "core/timer.h"

namespace mt::plan {

// Best time of fn over repeats within `seconds` (the least disturbed by other load);
// before(), untimed, runs ahead of each timed call.
template <typename Fn, typename Before>
inline double best_time_after(double seconds, Fn fn, Before before) {
  fn();  // warm-up
  double best = 1e30;
  const double t_end = now_seconds() + seconds;
  int runs = 0;
  do {
    before();
    const double t0 = now_seconds();
    fn();
    best = std::min(best, now_seconds() - t0);
    ++runs;
  } while (now_seconds() < t_end || runs < 3);
  return best;
}

template <typename Fn>
inline double best_time(double seconds, Fn fn) {
  return best_time_after(seconds, fn, [] {});
}

// The same, with the caches emptied of fn's data before each timed call (64 MiB streamed
// through): a kernel inside a training step finds its inputs in memory, written by the
// layers before it, not in the cache from its own previous call.
template <typename Fn>
inline double best_time_cold(double seconds, Fn fn) {
  static std::vector<float> evict(size_t(16) << 20, 1.0f);
  volatile float sink = 0;
  return best_time_after(seconds, fn, [&] {
    float acc = 0;
    for (size_t i = 0; i < evict.size(); i += 16) acc += (evict[i] += 1.0f);
    sink = sink + acc;
  });
}

// The share of --calibrate-seconds of a probe that starts child processes (real training
// steps, mpirun), whose cost is a whole run, not a kernel call: a run is started while the
// share still holds about what it will take (the previous run's wall, or an estimate).
class ChildBudget {
 public:
  explicit ChildBudget(double seconds) : end_(now_seconds() + seconds) {}
  bool allows(double estimate_s) const { return now_seconds() + estimate_s <= end_; }
  // fn(), its wall kept as last_run_s().
  template <typename Fn>
  auto time(Fn fn) {
    const double t0 = now_seconds();
    auto result = fn();
    last_ = now_seconds() - t0;
    return result;
  }
  double last_run_s() const { return last_; }

 private:
  double end_, last_ = 0;
};

}  // namespace mt::plan
