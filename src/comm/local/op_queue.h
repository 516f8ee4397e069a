// The ordered queue of one rank's calls on one communicator, and who runs them.
//
// Why a progress thread per (rank, communicator): a local collective blocks its executor
// until the peers arrive, so two communicators sharing one executor could deadlock (rank 0
// inside a tp all-reduce whose peer first waits for a dp all-reduce that rank 0 issued but
// has not started). One thread per communicator makes the communicators independent and
// lets an issued call progress while the rank computes; the threads sleep when idle.
//
// A rank that waits on a call not yet started runs the queue head itself instead of waking
// the progress thread and sleeping ("caller steals"): a blocking call then costs no thread
// hand-off. To leave the caller that chance, the progress thread, woken from idle, gives a
// new task kGrace before taking it (a call that is waited on at once never pays a hand-off;
// one that is left to progress in the background starts kGrace later). Either way the
// tasks run one at a time, in issue order. A call pushed under WaitedAtOnce
// (comm/communicator.h) does not wake the progress thread at all: on cores that are all
// computing, that wake-up and the thread's return to sleep cost context switches on every
// call.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/local/doorbell.h"

namespace mt::local {

class OpQueue {
 public:
  using Task = std::function<void()>;  // must not throw (a task records its own failure)

  explicit OpQueue(const WaitPolicy& policy) : policy_{0, policy.yield_polls} {}
  ~OpQueue() { stop(); }
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Appends a task; returns its ticket (1-based issue index). wake false: the caller will
  // wait on it at once and run it itself, so the idle progress thread is not woken for it.
  uint64_t push(Task task, bool wake = true);
  // Number of tasks pushed so far (the ticket of the latest one).
  uint64_t issued() const;
  bool done(uint64_t ticket) const { return completed_.load() >= ticket; }
  // Blocks until the task with this ticket (and so every earlier one) has run, running
  // queued tasks on the calling thread when nobody else is.
  void wait(uint64_t ticket);
  // Runs what is left, then joins the progress thread.
  void stop();

 private:
  bool run_head(std::unique_lock<std::mutex>& lock);  // false when nothing is runnable
  void progress_loop();

  static constexpr std::chrono::microseconds kGrace{50};
  WaitPolicy policy_;  // for waits on completion: never spin, the executor needs the core
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<Task> tasks_;
  bool running_ = false;  // a task is executing (by the progress thread or a stealer)
  bool stopping_ = false;
  uint64_t issued_ = 0;
  std::atomic<uint64_t> completed_{0};
  Doorbell completed_bell_;
  std::thread worker_;
};

}  // namespace mt::local
