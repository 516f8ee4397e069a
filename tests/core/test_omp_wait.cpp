// The decision of core/omp_wait.h on made-up environments: a bounded spin count when the
// user chose nothing, and the user's own choice left alone.
#include "core/omp_wait.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace mt {
namespace {

std::optional<EnvAssignment> decide(const std::map<std::string, std::string>& env) {
  return omp_wait_assignment([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(OmpWait, NothingChosenGetsTheBoundedSpinCount) {
  const auto a = decide({});
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->name, "GOMP_SPINCOUNT");
  EXPECT_EQ(a->value, kDefaultGompSpinCount);
  // Other OpenMP settings are not a choice of wait policy.
  EXPECT_TRUE(decide({{"OMP_NUM_THREADS", "2"}, {"OMP_PROC_BIND", "true"}}).has_value());
}

TEST(OmpWait, TheUsersChoiceIsKept) {
  for (const char* policy : {"passive", "active", "PASSIVE", "bogus"})
    EXPECT_FALSE(decide({{"OMP_WAIT_POLICY", policy}}).has_value()) << policy;
  for (const char* count : {"0", "300000", "infinity"})
    EXPECT_FALSE(decide({{"GOMP_SPINCOUNT", count}}).has_value()) << count;
  EXPECT_FALSE(decide({{"OMP_WAIT_POLICY", "active"}, {"GOMP_SPINCOUNT", "5"}}).has_value());
}

TEST(OmpWait, AnEmptyValueIsNoChoice) {
  // libgomp reads an empty variable as unset, so its default would spin.
  EXPECT_TRUE(decide({{"OMP_WAIT_POLICY", ""}}).has_value());
  EXPECT_TRUE(decide({{"GOMP_SPINCOUNT", ""}}).has_value());
  EXPECT_FALSE(decide({{"OMP_WAIT_POLICY", ""}, {"GOMP_SPINCOUNT", "7"}}).has_value());
}

}  // namespace
}  // namespace mt
