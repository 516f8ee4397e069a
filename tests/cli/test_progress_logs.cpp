// Logs that fit where they go (issue #31, item 4): the bar only on a terminal outside a
// launcher, plain lines every --log-every steps otherwise, and --quiet keeps one summary.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_fixture.h"
#include "run_binary.h"

namespace mt {
namespace {

using testing::Fixture;
using testing::run_command;
using testing::run_meshtrain;

const char* const kErase = "\033[K";

// Runs meshtrain with its stdout on a pseudo-terminal (util-linux `script`, in every Debian), as a
// person at a terminal would, or as Open MPI gives each rank; `env` is put before the command.
testing::RunResult run_on_terminal(const std::string& env, const std::string& args) {
  testing::expect_binary_allowed();
  const std::string inner = env + " " + MESHTRAIN_BIN + " " + args;
  return run_command("script -qec \"" + inner + "\" /dev/null");
}

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(ProgressLogs, AutoDrawsTheBarOnlyOnATerminalOutsideALauncher) {
  Fixture f;
  const std::string args =
      "train --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --steps 3 "
      "--data " +
      f.data;
  const auto alone = run_on_terminal("", args);
  ASSERT_EQ(alone.exit_code, 0) << alone.err << alone.out;
  EXPECT_NE(alone.out.find(kErase), std::string::npos) << alone.out;
  // mpirun's environment: each rank's stdout is a terminal too, but the log is a file.
  const auto launched = run_on_terminal("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1", args);
  ASSERT_EQ(launched.exit_code, 0) << launched.err << launched.out;
  EXPECT_EQ(launched.out.find(kErase), std::string::npos) << launched.out;
  EXPECT_EQ(launched.out.find('\r' + std::string(kErase)), std::string::npos);
  EXPECT_NE(launched.out.find("step 3/3 | loss"), std::string::npos) << launched.out;
  // Slurm's srun and PMI launchers count as well.
  const auto srun = run_on_terminal("SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=1", args);
  EXPECT_EQ(srun.out.find(kErase), std::string::npos) << srun.out;
  // --progress bar draws it anyway.
  const auto forced =
      run_on_terminal("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1", args + " --progress bar");
  EXPECT_NE(forced.out.find(kErase), std::string::npos) << forced.out;
}

TEST(ProgressLogs, LinesComeEveryLogEveryStepsAndAtTheLast) {
  Fixture f;
  const std::string args =
      "train --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --steps 5 "
      "--data " +
      f.data;
  const auto r = run_meshtrain(args + " --progress lines --log-every 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "\nstep "), 3) << r.out;  // steps 2, 4 and 5
  EXPECT_NE(r.out.find("step 2/5 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 5/5 |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 3/5 |"), std::string::npos) << r.out;
  const auto none = run_meshtrain(args + " --progress none");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.out.find("/5 |"), std::string::npos) << none.out;
  EXPECT_NE(none.out.find("meshtrain: done: steps 1-5"), std::string::npos) << none.out;
  testing::expect_usage_error(run_meshtrain(args + " --progress fancy"),
                              "--progress must be one of");
}

TEST(ProgressLogs, QuietPrintsOnlyTheSummaryLine) {
  Fixture f;
  const std::string dir = f.dir / "run";
  const auto r = run_meshtrain(f.base() + " --val-data " + f.data + " --eval-every 2 --metrics " +
                               dir + "/m.jsonl --save " + dir + "/ck");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "\n"), 1) << r.out;
  EXPECT_EQ(r.out.rfind("meshtrain: done: steps 1-2 | loss ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(" | val_loss "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" (step 2) | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" tok/s | outputs: metrics " + dir + "/m.jsonl, report page " + dir +
                       "/m.html, checkpoint " + dir + "/ck"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace mt
