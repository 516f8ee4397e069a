// --bind (docs/contracts.md, engine flags): cores refuses, before any rank starts, a layout
// with more compute threads than the cores the process may use; none and auto run.
#include <gtest/gtest.h>

#include <string>

#include "cli_fixture.h"
#include "run_binary.h"

namespace mt {
namespace {

using testing::expect_usage_error;
using testing::Fixture;
using testing::run_meshtrain;

TEST(BindFlag, CoresRefusesMoreComputeThreadsThanTheProcessMayUse) {
  Fixture f;
  // 2 ranks x 256 threads: more than any machine this runs on; refused before the ranks
  // would start their threads.
  expect_usage_error(run_meshtrain(f.base() + " --dp 2 --threads 256 --bind cores --steps 1"),
                     "--bind cores needs a core per compute thread: 2 ranks x 256 threads = "
                     "512 cores, but this process may use ");
}

TEST(BindFlag, EveryModeTrains) {
  Fixture f;
  for (const char* mode : {"auto", "none"}) {
    SCOPED_TRACE(mode);
    const auto r = run_meshtrain(f.base() + " --dp 2 --steps 1 --bind " + mode);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
}

}  // namespace
}  // namespace mt
