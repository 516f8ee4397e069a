#include "comm/mpi/background_progress.h"

#include <algorithm>
#include <utility>

#include "core/core_binding.h"

namespace mt {

BackgroundProgress::BackgroundProgress(std::chrono::microseconds quantum) : quantum_(quantum) {
  thread_ = std::thread([this] { run(); });
}

BackgroundProgress::~BackgroundProgress() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BackgroundProgress::watch(std::weak_ptr<Work::Impl> w) {
  {
    std::lock_guard lock(mu_);
    incoming_.push_back(std::move(w));
  }
  cv_.notify_one();
}

bool BackgroundProgress::poll(Work::Impl& w) {
  try {
    return w.test();
  } catch (...) {
    return true;  // the failure stays with the Work, for its waiter to rethrow
  }
}

void BackgroundProgress::run() {
  name_calling_thread("mt mpi progress");
  std::vector<std::weak_ptr<Work::Impl>> watched;
  for (;;) {
    // Take what was handed over; with nothing outstanding, sleep until something is.
    {
      std::unique_lock lock(mu_);
      if (watched.empty()) cv_.wait(lock, [&] { return stop_ || !incoming_.empty(); });
      if (stop_) return;
      watched.insert(watched.end(), std::make_move_iterator(incoming_.begin()),
                     std::make_move_iterator(incoming_.end()));
      incoming_.clear();
    }
    // One round: each outstanding Work once; the finished and the dropped leave the list.
    const auto done = [this](const std::weak_ptr<Work::Impl>& weak) {
      const std::shared_ptr<Work::Impl> w = weak.lock();
      if (!w) return true;
      if (!poll(*w)) return false;
      ++completed_;
      return true;
    };
    watched.erase(std::remove_if(watched.begin(), watched.end(), done), watched.end());
    ++rounds_;
    if (!watched.empty()) std::this_thread::sleep_for(quantum_);
  }
}

}  // namespace mt
