// The local backend's op queue: a call advances on the thread that issues, tests or waits
// on it, and its progress thread runs only when a peer asks for it (comm/local/op_queue.h).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "comm/local/group_state.h"
#include "comm/local/local_job.h"
#include "comm/local/op_queue.h"
#include "comm/world.h"

namespace mt::local {
namespace {

// An op of `steps` steps; step k may run once `gate` >= k. Records which threads ran it.
class CountingOp final : public QueuedOp {
 public:
  CountingOp(int steps, const std::atomic<int>& gate) : steps_(steps), gate_(gate) {}
  bool advance() override {
    if (std::this_thread::get_id() != owner_) foreign_calls.fetch_add(1);
    while (done_ < steps_ && gate_.load() >= done_) done_.fetch_add(1);
    return done_ == steps_;
  }
  bool ready() const override { return done_ == steps_ || gate_.load() >= done_; }
  void request_laggards() const override { requests.fetch_add(1); }
  void time_out(double) override {  // as a failed op does: finished
    timed_out = true;
    done_ = steps_;
  }

  mutable std::atomic<int> requests{0};
  std::atomic<int> foreign_calls{0};  // advance() on a thread other than the test's
  std::atomic<bool> timed_out{false};

 private:
  int steps_;
  const std::atomic<int>& gate_;
  std::atomic<int> done_{0};
  const std::thread::id owner_ = std::this_thread::get_id();
};

struct Fixture {
  WorldOptions opts;
  LocalJob job{2, opts};
  std::shared_ptr<GroupState> group = job.world_group();
};

TEST(OpQueue, IssueAndPollAdvanceOnTheCallingThreadWithoutWakingTheProgressThread) {
  Fixture f;
  OpQueue q(f.group, 0, WaitPolicy{}, 60);
  std::atomic<int> gate{0};
  auto op = std::make_shared<CountingOp>(3, gate);
  const uint64_t ticket = q.push(op);
  EXPECT_FALSE(q.done(ticket));  // step 0 ran at issue; step 1 waits for the gate
  gate = 1;
  EXPECT_FALSE(q.poll(ticket));
  gate = 2;
  EXPECT_TRUE(q.poll(ticket));
  EXPECT_EQ(op->foreign_calls.load(), 0);
  std::lock_guard lock(f.group->lines[0].mu);
  EXPECT_EQ(f.group->lines[0].requests, 0u);
}

// A peer that sleeps on this member asks for progress; the progress thread then advances
// the queue although its owner never touches it again.
TEST(OpQueue, APeersRequestMakesTheProgressThreadAdvance) {
  Fixture f;
  OpQueue q(f.group, 1, WaitPolicy{}, 60);
  std::atomic<int> gate{0};
  auto op = std::make_shared<CountingOp>(2, gate);
  const uint64_t ticket = q.push(op);
  gate = 1;
  f.group->lines[1].request();
  while (!q.done(ticket)) std::this_thread::yield();
  EXPECT_GT(op->foreign_calls.load(), 0);
}

TEST(OpQueue, AWaiterAsksTheLaggardsAndTimesTheOpOut) {
  Fixture f;
  OpQueue q(f.group, 0, WaitPolicy{0, 1}, 0.05);
  std::atomic<int> gate{0};
  auto op = std::make_shared<CountingOp>(2, gate);
  const uint64_t ticket = q.push(op);
  q.wait(ticket);
  EXPECT_TRUE(op->timed_out);
  EXPECT_GT(op->requests.load(), 0);
}

}  // namespace
}  // namespace mt::local
