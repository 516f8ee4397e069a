// Monotonic wall-clock helpers.
#pragma once

#include <chrono>

namespace mt {

inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

class Stopwatch {
 public:
  Stopwatch() : start_(now_seconds()) {}
  double elapsed() const { return now_seconds() - start_; }

 private:
  double start_;
};

}  // namespace mt
