// Monotonic wall-clock helpers, and the calling thread's CPU time.
#pragma once

#include <time.h>

#include <chrono>

namespace mt {

inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Seconds of CPU the calling thread has used. Unlike wall time it does not grow while the
// thread waits for a core, so on a loaded machine it reads what a quiet one would give
// (bench step --breakdown's cpu column). A system call, not a vDSO read: about a
// microsecond, for profiling only.
inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

class Stopwatch {
 public:
  Stopwatch() : start_(now_seconds()) {}
  double elapsed() const { return now_seconds() - start_; }

 private:
  double start_;
};

}  // namespace mt
