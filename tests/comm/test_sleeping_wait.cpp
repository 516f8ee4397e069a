// comm/hybrid/sleeping_wait.h: the hybrid communicator's worker polls an MPI step with
// sleeps between polls (after a few at once), so that it leaves the cores to the computing
// ranks, and hands over to Work::wait (the group's timeout) only after its sleep budget.
// Counted on a fake Work that records every call, not timed.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "comm/hybrid/sleeping_wait.h"

namespace mt::hybrid {
namespace {

// Completes at the n-th test(); logs "test", "sleep" and "wait" in call order.
struct FakeWork final : Work::Impl {
  FakeWork(std::vector<std::string>& l, int n) : log(l), tests_left(n) {}
  bool test() override {
    log.push_back("test");
    return --tests_left <= 0;
  }
  void wait() override { log.push_back("wait"); }
  std::vector<std::string>& log;
  int tests_left;
};

SleepingWait recorded(std::vector<std::string>& log, int spin_polls, int max_sleeps) {
  SleepingWait how;
  how.spin_polls = spin_polls;
  how.max_sleeps = max_sleeps;
  how.sleep = [&log](std::chrono::microseconds q) {
    EXPECT_EQ(q.count(), 100);
    log.push_back("sleep");
  };
  return how;
}

TEST(SleepingWait, SleepsBetweenPollsOnceTheSpinIsOver) {
  std::vector<std::string> log;
  Work w(std::make_shared<FakeWork>(log, 6));
  wait_sleeping(w, recorded(log, 2, 100));
  const std::vector<std::string> want = {"test", "test",  "sleep", "test",  "sleep",
                                         "test", "sleep", "test",  "sleep", "test"};
  EXPECT_EQ(log, want);
}

TEST(SleepingWait, AShortStepReturnsWithoutSleeping) {
  std::vector<std::string> log;
  Work w(std::make_shared<FakeWork>(log, 3));
  wait_sleeping(w, recorded(log, 16, 100));
  EXPECT_EQ(log, (std::vector<std::string>{"test", "test", "test"}));
}

TEST(SleepingWait, HandsOverToWorkWaitAfterItsSleepBudget) {
  std::vector<std::string> log;
  Work w(std::make_shared<FakeWork>(log, 1000));
  wait_sleeping(w, recorded(log, 1, 3));
  const std::vector<std::string> want = {"test", "sleep", "test", "sleep",
                                         "test", "sleep", "test", "wait"};
  EXPECT_EQ(log, want);
}

}  // namespace
}  // namespace mt::hybrid
