// The binary's OpenMP wait policy (core/omp_wait.h), seen as libgomp reports it: with
// OMP_DISPLAY_ENV=verbose libgomp prints its settings when it loads, so a re-executed
// binary prints them twice, the second time with the bounded spin count.
#include <gtest/gtest.h>

#include <string>

#include "core/omp_wait.h"
#include "run_binary.h"

namespace mt {
namespace {

using testing::run_command;
using testing::RunResult;

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

RunResult version_with(const std::string& env) {
  // env -u: the test must not inherit a policy from the shell that runs it.
  return run_command("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " + env +
                     " OMP_DISPLAY_ENV=verbose " + MESHTRAIN_BIN + " --version");
}

const char* kBanner = "OPENMP DISPLAY ENVIRONMENT BEGIN";

TEST(OmpWaitEnv, UnsetPolicyIsReexecutedWithTheBoundedSpinCount) {
  const RunResult r = version_with("");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.out, "meshtrain "), 1) << r.out;  // only the re-executed image ran main
  EXPECT_EQ(count(r.err, kBanner), 2) << r.err;
  const std::string bounded = std::string("GOMP_SPINCOUNT = '") + kDefaultGompSpinCount + "'";
  EXPECT_NE(r.err.rfind(bounded), std::string::npos) << r.err;
  EXPECT_GT(r.err.rfind(bounded), r.err.rfind(kBanner)) << "the last load must use it";
}

TEST(OmpWaitEnv, TheUsersSettingIsLeftAlone) {
  RunResult r = version_with("GOMP_SPINCOUNT=123");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.err, kBanner), 1) << r.err;
  EXPECT_NE(r.err.find("GOMP_SPINCOUNT = '123'"), std::string::npos) << r.err;
  r = version_with("OMP_WAIT_POLICY=active");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.err, kBanner), 1) << r.err;
  EXPECT_NE(r.err.find("OMP_WAIT_POLICY = 'ACTIVE'"), std::string::npos) << r.err;
}

TEST(OmpWaitEnv, ArgumentsSurviveTheReexec) {
  // A usage error needs the re-executed image to have seen the same argv.
  const RunResult r = run_command("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " +
                                  std::string(MESHTRAIN_BIN) + " train --steps -1 --quiet");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--steps must be in 0..1000000000 (got -1)"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mt
