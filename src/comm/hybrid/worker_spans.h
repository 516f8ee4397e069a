// What a communicator's worker thread did, for a trace (hierarchical_communicator.h): the
// worker appends spans while recording is on, the rank's thread takes them. Two threads,
// hence the lock; nothing is kept while recording is off.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace mt::hybrid {

struct WorkerSpan {
  std::string name;
  double begin = 0, end = 0;  // seconds on the steady clock (core/timer.h)
};

class WorkerSpans {
 public:
  void set_recording(bool on) { recording_ = on; }
  bool recording() const { return recording_; }
  void record(std::string name, double begin, double end) {
    if (!recording_) return;
    std::lock_guard lock(mu_);
    spans_.push_back({std::move(name), begin, end});
  }
  std::vector<WorkerSpan> take() {
    std::lock_guard lock(mu_);
    return std::exchange(spans_, {});
  }

 private:
  std::atomic<bool> recording_{false};
  std::mutex mu_;
  std::vector<WorkerSpan> spans_;
};

}  // namespace mt::hybrid
