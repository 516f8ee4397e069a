// The rule that ends the GEMM peak's warm-up and its rounds (kernels/peak_settling.h), on
// scripted rates: a ramp is waited out, a disturbed window buys another, a machine that
// never settles is capped and says so. No clock is asserted.
#include "kernels/peak_settling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace mt {
namespace {

// Returns the scripted values in order (the last one again once they run out).
struct Script {
  std::vector<double> values;
  size_t next = 0;
  double operator()() { return values[std::min(next++, values.size() - 1)]; }
};

Settled run(std::vector<double> values, SettleRule rule = {}) {
  Script s{std::move(values)};
  return measure_until_settled([&] { return s(); }, rule);
}

TEST(PeakSettling, AgreementIsRelativeToTheLargerRate) {
  EXPECT_TRUE(rates_agree(100, 105, 0.05));
  EXPECT_TRUE(rates_agree(105, 100, 0.05));
  EXPECT_FALSE(rates_agree(100, 106, 0.05));
  EXPECT_FALSE(rates_agree(0, 0, 0.05));  // no rate yet is not agreement
}

// A fresh process's AMX ramp (51, 510, 670, 700, 702): a fixed three runs would stop at 670.
TEST(PeakSettling, AWarmUpRunsUntilTwoConsecutiveRunsAgree) {
  const Settled s = run({51, 510, 670, 700, 702, 9999}, {0.05, 3, 100, 0});
  EXPECT_TRUE(s.settled);
  EXPECT_EQ(s.calls, 4);  // 670 and 700 agree within 5%
  EXPECT_EQ(s.best, 700);
}

TEST(PeakSettling, AgreementBeforeTheMinimumDoesNotEndIt) {
  const Settled s = run({200, 201, 150, 202, 203}, {0.05, 3, 100, 0});
  EXPECT_EQ(s.calls, 5);
  EXPECT_TRUE(s.settled);
  EXPECT_EQ(s.best, 203);
}

// Stop 37: one window read 103 while the machine's steady figure was 154-167. The first
// round alone would report 103; the disagreeing second round buys a third.
TEST(PeakSettling, ADisturbedRoundBuysAnotherAndTheBestIsKept) {
  const Settled s = run({103, 160, 162}, {0.05, 2, 4, 0});
  EXPECT_TRUE(s.settled);
  EXPECT_EQ(s.calls, 3);
  EXPECT_EQ(s.best, 162);
  // A disturbance in the last round does not lower the figure either.
  const Settled late = run({160, 120, 121}, {0.05, 2, 4, 0});
  EXPECT_EQ(late.best, 160);
}

TEST(PeakSettling, AMachineThatNeverSettlesIsCappedAndSaysSo) {
  const Settled s = run({100, 150, 100, 150, 100, 150}, {0.05, 2, 4, 0});
  EXPECT_FALSE(s.settled);
  EXPECT_EQ(s.calls, 4);
  EXPECT_EQ(s.best, 150);
}

TEST(PeakSettling, TheTimeCapEndsItOnceTheMinimumIsDone) {
  int calls = 0;
  const Settled s = measure_until_settled([&] { return double(++calls % 2 ? 100 : 200); },
                                          {0.05, 3, 1 << 20, 1e-9});
  EXPECT_EQ(s.calls, 3);  // the cap had passed after the first call; the minimum still ran
  EXPECT_FALSE(s.settled);
}

}  // namespace
}  // namespace mt
