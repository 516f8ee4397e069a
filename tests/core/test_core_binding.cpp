// The plan of core/core_binding.h: which cores each local rank's compute threads get.
#include "core/core_binding.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mt {
namespace {

using Plan = std::vector<std::vector<int>>;

TEST(CoreBinding, AutoGivesEachRankCoresOfItsOwnWhenTheyFit) {
  EXPECT_EQ(plan_core_binding({0, 1}, 2, 1, CoreBinding::automatic), (Plan{{0}, {1}}));
  // A rank's OpenMP team stays together, on consecutive allowed cores.
  EXPECT_EQ(plan_core_binding({0, 1, 2, 3}, 2, 2, CoreBinding::automatic), (Plan{{0, 1}, {2, 3}}));
  // The cores the process may use (taskset, a cgroup), not 0..n-1.
  EXPECT_EQ(plan_core_binding({2, 5, 7, 9, 11}, 4, 1, CoreBinding::automatic),
            (Plan{{2}, {5}, {7}, {9}}));
}

TEST(CoreBinding, AutoBindsRoundRobinWhenRanksShareCores) {
  // tp 2 x pp 2 on 2 cores: each stage's pair (ranks 0-1, 2-3) on two cores, not stacked.
  EXPECT_EQ(plan_core_binding({0, 1}, 4, 1, CoreBinding::automatic), (Plan{{0}, {1}, {0}, {1}}));
  EXPECT_EQ(plan_core_binding({3, 5, 8}, 4, 1, CoreBinding::automatic), (Plan{{3}, {5}, {8}, {3}}));
  EXPECT_EQ(plan_core_binding({0, 1}, 3, 1, CoreBinding::automatic), (Plan{{0}, {1}, {0}}));
  // Two threads a rank: rank 1's team wraps around the set.
  EXPECT_EQ(plan_core_binding({0, 1, 2}, 2, 2, CoreBinding::automatic), (Plan{{0, 1}, {2, 0}}));
  EXPECT_EQ(plan_core_binding({0, 1}, 2, 2, CoreBinding::automatic), (Plan{{0, 1}, {0, 1}}));
  EXPECT_TRUE(plan_core_binding({}, 2, 1, CoreBinding::automatic).empty());
  // One rank has no peer to collide with.
  EXPECT_TRUE(plan_core_binding({0, 1}, 1, 1, CoreBinding::automatic).empty());
}

TEST(CoreBinding, CoresBindsEvenOneRankAndRefusesWhatDoesNotFit) {
  EXPECT_EQ(plan_core_binding({4, 6}, 1, 2, CoreBinding::cores), (Plan{{4, 6}}));
  try {
    plan_core_binding({0, 1}, 2, 2, CoreBinding::cores);
    FAIL() << "4 compute threads on 2 cores were bound";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--bind cores needs a core per compute thread: 2 "
                                         "ranks x 2 threads = 4 cores, but this process may "
                                         "use 2"),
              std::string::npos)
        << e.what();
  }
}

TEST(CoreBinding, NoneNeverBinds) {
  EXPECT_TRUE(plan_core_binding({0, 1, 2, 3}, 2, 1, CoreBinding::none).empty());
}

TEST(CoreBinding, NamesRoundTrip) {
  for (const auto& [name, b] : core_binding_names()) EXPECT_EQ(core_binding_name(b), name);
}

}  // namespace
}  // namespace mt
