#include "comm/local/op_queue.h"

#include "comm/local/group_state.h"
#include "comm/local/local_job.h"
#include "core/core_binding.h"
#include "core/threads.h"
#include "core/timer.h"

namespace mt::local {

namespace {

struct DeadlinePassed {};

}  // namespace

OpQueue::OpQueue(std::shared_ptr<GroupState> group, int member, const WaitPolicy& policy,
                 double timeout_s)
    : group_(std::move(group)),
      bell_(group_->bell),
      line_(group_->lines[member]),
      policy_(policy),
      timeout_s_(timeout_s) {}

uint64_t OpQueue::push(std::shared_ptr<QueuedOp> op) {
  uint64_t ticket;
  {
    std::lock_guard lock(mu_);
    if (!worker_.joinable() && !stopping_)
      worker_ = start_thread("the progress thread of a communicator", [this] { progress_loop(); });
    ops_.push_back(std::move(op));
    ticket = ++issued_;
  }
  drive();  // a new op publishes at once; earlier ones advance if their peers are ready
  return ticket;
}

uint64_t OpQueue::issued() const {
  std::lock_guard lock(mu_);
  return issued_;
}

std::shared_ptr<QueuedOp> OpQueue::head() const {
  std::lock_guard lock(mu_);
  return ops_.empty() ? nullptr : ops_.front();
}

bool OpQueue::drive() {
  std::unique_lock lock(mu_);
  if (running_) return false;
  running_ = true;
  bool finished_any = false;
  while (!ops_.empty()) {
    std::shared_ptr<QueuedOp> op = ops_.front();
    lock.unlock();
    const bool finished = op->advance();
    lock.lock();
    if (!finished) break;
    ops_.pop_front();
    completed_.fetch_add(1);
    finished_any = true;
  }
  running_ = false;
  lock.unlock();
  // Another thread of this rank may sleep on a completion (a wait behind the token holder).
  if (finished_any) bell_.ring();
  return true;
}

bool OpQueue::poll(uint64_t ticket) {
  if (!done(ticket)) drive();
  return done(ticket);
}

void OpQueue::expire(const std::shared_ptr<QueuedOp>& op) {
  std::unique_lock lock(mu_);
  if (running_ || ops_.empty() || ops_.front() != op) return;
  running_ = true;
  lock.unlock();
  op->time_out(timeout_s_);
  lock.lock();
  running_ = false;
}

void OpQueue::wait(uint64_t ticket) {
  double deadline = 0;
  std::shared_ptr<QueuedOp> timed;  // the op the deadline is for: each op gets the timeout
  while (!done(ticket)) {
    if (!drive()) {  // the progress thread holds the token for a step: let it finish
      std::this_thread::yield();
      continue;
    }
    const std::shared_ptr<QueuedOp> op = head();
    if (done(ticket) || !op) continue;
    if (op != timed) {
      timed = op;
      deadline = now_seconds() + timeout_s_;
    }
    // Sleep until the head can advance. Before each sleep, ask the members it waits for
    // to progress: they may be blocked on another communicator, or computing.
    try {
      bell_.wait(
          policy_, [&] { return done(ticket) || op->ready(); },
          [&] {
            op->request_laggards();
            if (now_seconds() > deadline) throw DeadlinePassed{};
          });
    } catch (const DeadlinePassed&) {
      expire(op);  // outside the doorbell's lock: failing the job rings every doorbell
    }
  }
}

// Woken only by a peer that sleeps on this member: advances what it can, then sleeps again.
// It runs while its own rank computes, so it must not be held to that rank's bound core:
// it takes any core of the process (in practice, that of a rank that waits).
void OpQueue::progress_loop() {
  if (!group_->job.progress_cores().empty()) bind_calling_thread(group_->job.progress_cores());
  name_calling_thread("mt progress");
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(line_.mu);
      line_.cv.wait(lock, [&] { return line_.requests != seen || line_.stopping; });
      if (line_.stopping) return;
      seen = line_.requests;
    }
    while (!drive()) std::this_thread::yield();
  }
}

void OpQueue::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wait(issued());  // peers may be waiting for these; after a failure they fail fast
  {
    std::lock_guard lock(line_.mu);
    line_.stopping = true;
  }
  line_.cv.notify_all();
  if (worker_.joinable()) worker_.join();
}

}  // namespace mt::local
