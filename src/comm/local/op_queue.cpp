#include "comm/local/op_queue.h"

#include "core/threads.h"

namespace mt::local {

uint64_t OpQueue::push(Task task, bool wake) {
  std::unique_lock lock(mu_);
  if (!worker_.joinable() && !stopping_)
    worker_ = start_thread("the progress thread of a communicator", [this] { progress_loop(); });
  tasks_.push_back(std::move(task));
  const uint64_t ticket = ++issued_;
  lock.unlock();
  if (wake) work_cv_.notify_one();
  return ticket;
}

uint64_t OpQueue::issued() const {
  std::lock_guard lock(mu_);
  return issued_;
}

bool OpQueue::run_head(std::unique_lock<std::mutex>& lock) {
  if (running_ || tasks_.empty()) return false;
  Task task = std::move(tasks_.front());
  tasks_.pop_front();
  running_ = true;
  lock.unlock();
  task();
  lock.lock();
  running_ = false;
  completed_.fetch_add(1);
  completed_bell_.ring();
  if (!tasks_.empty() || stopping_) work_cv_.notify_one();
  return true;
}

void OpQueue::wait(uint64_t ticket) {
  while (!done(ticket)) {
    {
      std::unique_lock lock(mu_);
      if (run_head(lock)) continue;
    }
    // Someone else runs our task (or an earlier one): wait for the next completion.
    const uint64_t seen = completed_.load();
    if (seen >= ticket) break;
    completed_bell_.wait(
        policy_, [&] { return completed_.load() != seen; }, [] {});
  }
}

void OpQueue::progress_loop() {
  std::unique_lock lock(mu_);
  bool idle = true;
  for (;;) {
    if (idle && !tasks_.empty() && !stopping_) {
      idle = false;
      work_cv_.wait_for(lock, kGrace);  // a waiting caller may take the task meanwhile
      continue;
    }
    if (run_head(lock)) continue;
    if (stopping_ && tasks_.empty() && !running_) return;
    idle = true;
    work_cv_.wait(lock);
  }
}

void OpQueue::stop() {
  std::unique_lock lock(mu_);
  stopping_ = true;
  if (!worker_.joinable()) {
    while (run_head(lock)) {
    }
    return;
  }
  lock.unlock();
  work_cv_.notify_all();
  worker_.join();
}

}  // namespace mt::local
