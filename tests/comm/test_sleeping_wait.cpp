// comm/hybrid/sleeping_wait.h: the hybrid communicator's worker polls an MPI step with
// sleeps between polls (after a few at once), so that it leaves the cores to the computing
// ranks, and keeps the group's timeout itself: past it, Work::wait_after fails the step with
// the time the loop really waited. Counted on a fake Work that records every call; the one
// real-time case bounds only generously.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/hybrid/sleeping_wait.h"
#include "core/timer.h"

namespace mt::hybrid {
namespace {

// Completes at the n-th test() (never when n < 0); logs "test", "sleep" and
// "wait_after" in call order. wait_after keeps what it was told and fails, as a stuck MPI
// step does.
struct FakeWork final : Work::Impl {
  FakeWork(std::vector<std::string>& l, int n) : log(l), tests_left(n) {}
  bool test() override {
    log.push_back("test");
    return tests_left >= 0 && --tests_left <= 0;
  }
  void wait() override { log.push_back("wait"); }
  void wait_after(double waited_s) override {
    log.push_back("wait_after");
    waited = waited_s;
    throw std::runtime_error("timed out");
  }
  std::vector<std::string>& log;
  int tests_left;
  double waited = -1;
};

// Sleeps are recorded and move a fake clock by their quantum.
SleepingWait recorded(std::vector<std::string>& log, double& clock, int spin_polls) {
  SleepingWait how;
  how.spin_polls = spin_polls;
  how.sleep = [&log, &clock](std::chrono::microseconds q) {
    EXPECT_EQ(q.count(), 100);
    log.push_back("sleep");
    clock += 1e-6 * double(q.count());
  };
  how.clock = [&clock] { return clock; };
  return how;
}

TEST(SleepingWait, SleepsBetweenPollsOnceTheSpinIsOver) {
  std::vector<std::string> log;
  double clock = 0;
  Work w(std::make_shared<FakeWork>(log, 6));
  wait_sleeping(w, recorded(log, clock, 2));
  const std::vector<std::string> want = {"test", "test",  "sleep", "test",  "sleep",
                                         "test", "sleep", "test",  "sleep", "test"};
  EXPECT_EQ(log, want);
}

TEST(SleepingWait, AShortStepReturnsWithoutSleeping) {
  std::vector<std::string> log;
  double clock = 0;
  Work w(std::make_shared<FakeWork>(log, 3));
  wait_sleeping(w, recorded(log, clock, 16));
  EXPECT_EQ(log, (std::vector<std::string>{"test", "test", "test"}));
}

// The timeout is the loop's: after 1 ms of 100 us sleeps (10 of them) the step fails with
// the time waited, not after a further sleep budget and a fresh wait of its own.
TEST(SleepingWait, FailsAtTheTimeoutWithTheTimeItWaited) {
  std::vector<std::string> log;
  double clock = 0;
  auto fake = std::make_shared<FakeWork>(log, -1);
  Work w(fake);
  SleepingWait how = recorded(log, clock, 1);
  how.timeout_s = 1e-3;
  EXPECT_THROW(wait_sleeping(w, how), std::runtime_error);
  std::vector<std::string> want = {"test"};
  for (int i = 0; i < 10; ++i) want.insert(want.end(), {"sleep", "test"});
  want.push_back("wait_after");
  EXPECT_EQ(log, want);
  EXPECT_NEAR(fake->waited, 1e-3, 1e-9);
}

// The same on the real clock and real sleeps: a 50 ms timeout fails well inside a bound
// (1.5 s) that the old hand-over (2 s of sleeps, then the group's whole timeout again)
// could not meet.
TEST(SleepingWait, AStuckStepFailsSoonAfterAShortTimeout) {
  std::vector<std::string> log;
  auto fake = std::make_shared<FakeWork>(log, -1);
  Work w(fake);
  SleepingWait how;
  how.timeout_s = 0.05;
  Stopwatch watch;
  EXPECT_THROW(wait_sleeping(w, how), std::runtime_error);
  EXPECT_LT(watch.elapsed(), 1.5);
  EXPECT_GE(fake->waited, 0.05);
  EXPECT_EQ(log.back(), "wait_after");
}

}  // namespace
}  // namespace mt::hybrid
