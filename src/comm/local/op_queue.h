// The ordered queue of one rank's collectives on one communicator, and who advances them.
//
// A queued op is a short chain of steps separated by waits for the peers (publish the
// descriptor; once every member has, run this member's share; once every member has,
// finish). advance() runs every step whose peers are ready and never blocks, so the op
// progresses wherever the rank passes a safe point, with no thread hand-off:
//   - at issue: the new op is pushed and the queue is advanced (a new op publishes at once,
//     so its peers find it ready when they reach it);
//   - Work::test(), which the data-parallel buckets call between layers (poll());
//   - Work::wait(), which advances the queue and sleeps on the group's doorbell between
//     steps, woken by the peers' arrivals.
// One thread advances a queue at a time (running_); ops finish in issue order.
//
// Why a progress thread remains, and why it is never woken per call: a rank blocked
// elsewhere (in a collective on another communicator, in a receive) must still do its
// share of an op its peers wait for, or two communicators could deadlock (rank 0 in a tp
// all-reduce whose peer waits for a dp all-reduce that rank 0 issued). A waiter that is
// about to sleep asks the members that have not arrived to progress (ProgressLine in
// group_state.h); their progress threads advance their queues then. So a thread is woken
// only when a peer already sleeps on this member, at most once per wait and sleep slice,
// never per call: on cores that are all computing, a wake-up per call cost two context
// switches and 20-150 us of a GEMM (the cost `bench comm --under-compute` measures).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/local/doorbell.h"

namespace mt::local {

struct GroupState;
struct ProgressLine;

// One queued call. All three run with the queue's token held, except ready(), which only
// reads atomics.
class QueuedOp {
 public:
  virtual ~QueuedOp() = default;
  // Runs every step whose peers are ready; true once finished (failed ones included).
  virtual bool advance() = 0;
  // advance() would make progress now (a step's peers are ready, or the job failed).
  virtual bool ready() const = 0;
  // Before a waiter sleeps on the op: asks the members it waits for to progress. Runs
  // under the group doorbell's lock, so it must not ring a doorbell.
  virtual void request_laggards() const = 0;
  // The waiter's deadline passed: records the timeout (naming the members that did not
  // arrive) as the op's failure and fails the job.
  virtual void time_out(double timeout_s) = 0;
};

class OpQueue {
 public:
  // The queue of member `member` of the group; waits use policy and time out after
  // timeout_s.
  OpQueue(std::shared_ptr<GroupState> group, int member, const WaitPolicy& policy,
          double timeout_s);
  ~OpQueue() { stop(); }
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Appends an op, then advances the queue; returns the op's ticket (1-based issue index).
  uint64_t push(std::shared_ptr<QueuedOp> op);
  // Number of ops pushed so far (the ticket of the latest one).
  uint64_t issued() const;
  bool done(uint64_t ticket) const { return completed_.load() >= ticket; }
  // Advances without blocking (a safe point); returns done(ticket).
  bool poll(uint64_t ticket);
  // Blocks until the op with this ticket (and so every earlier one) has finished. Errors
  // are recorded in the ops, not thrown.
  void wait(uint64_t ticket);
  // Finishes what is left, then joins the progress thread.
  void stop();

 private:
  // Advances the head op(s) while they make progress; false when another thread holds the
  // token. Never blocks.
  bool drive();
  // The waiter's deadline passed with op still at the head: fails it (under the token).
  void expire(const std::shared_ptr<QueuedOp>& op);
  std::shared_ptr<QueuedOp> head() const;
  void progress_loop();

  std::shared_ptr<GroupState> group_;  // kept alive by Work handles that outlive the comm
  Doorbell& bell_;
  ProgressLine& line_;
  WaitPolicy policy_;
  double timeout_s_;
  mutable std::mutex mu_;
  std::deque<std::shared_ptr<QueuedOp>> ops_;
  bool running_ = false;  // the token: a thread is advancing the head
  bool stopping_ = false;
  uint64_t issued_ = 0;
  std::atomic<uint64_t> completed_{0};
  std::thread worker_;
};

}  // namespace mt::local
