// Help for typos (issue #31, item 5): an unknown flag or command is named first, with the
// nearest valid names, and the help pointer names the command it was given to.
#include <gtest/gtest.h>

#include "cli/nearest_names.h"
#include "cli_fixture.h"
#include "run_binary.h"

namespace mt {
namespace {

using testing::expect_usage_error;
using testing::run_meshtrain;

// Unit cases (labelled unit in tests/CMakeLists.txt): no binary.
TEST(NearestNames, OneEditAndTranspositionsAreNear) {
  EXPECT_EQ(edit_distance("trian", "train"), 1u);
  EXPECT_EQ(edit_distance("step", "steps"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(nearest_names("--step", {"--seq", "--steps", "--seed"}),
            (std::vector<std::string>{"--steps"}));
  EXPECT_EQ(nearest_names("trian", {"train", "sample", "plan"}),
            (std::vector<std::string>{"train"}));
}

TEST(NearestNames, TiesAreAllOfferedAndFarNamesNever) {
  EXPECT_EQ(nearest_names("--beta", {"--beta1", "--beta2", "--batch"}),
            (std::vector<std::string>{"--beta1", "--beta2"}));
  EXPECT_TRUE(nearest_names("--no-such-flag", {"--steps", "--seq", "--lr"}).empty());
  EXPECT_EQ(nearest_names("--warm", {"--warmup", "--lr"}), (std::vector<std::string>{"--warmup"}));
  // A one-letter typo is nearer than a longer name the word begins.
  EXPECT_EQ(nearest_names("--rank", {"--ranks", "--ranks-per-process"}),
            (std::vector<std::string>{"--ranks"}));
  EXPECT_EQ(did_you_mean("--beta", {"--beta1", "--beta2"}), "; did you mean --beta1 or --beta2?");
  EXPECT_EQ(did_you_mean("zzz", {"train"}), "");
}

TEST(TypoHelp, UnknownFlagIsNamedFirstWithTheNearestFlag) {
  testing::Fixture f;
  const auto r = run_meshtrain(f.base() + " --step 10");
  expect_usage_error(r,
                     "unknown option --step; did you mean --steps? (see 'meshtrain train --help')");
  EXPECT_EQ(r.err.find("not expected"), std::string::npos) << r.err;
}

TEST(TypoHelp, EveryCommandPointsAtItsOwnHelp) {
  expect_usage_error(
      run_meshtrain("sample --tokns 3"),
      "unknown option --tokns; did you mean --tokens? (see 'meshtrain sample --help')");
  expect_usage_error(run_meshtrain("checkpoint verify --bogus x"),
                     "unknown option --bogus (see 'meshtrain checkpoint verify --help')");
  expect_usage_error(run_meshtrain("prepare --outt x"),
                     "unknown option --outt; did you mean --out? (see 'meshtrain prepare --help')");
}

TEST(TypoHelp, UnknownCommandsGetTheNearestCommand) {
  expect_usage_error(run_meshtrain("trian --steps 3"),
                     "unknown command 'trian'; did you mean train? (commands: ");
  expect_usage_error(run_meshtrain("checkpoint verfy /tmp"),
                     "unknown command 'checkpoint verfy'; did you mean verify? "
                     "(see 'meshtrain checkpoint --help')");
}

TEST(TypoHelp, OtherParseErrorsPointAtTheCommandsHelp) {
  expect_usage_error(run_meshtrain("train --steps"), "(see 'meshtrain train --help')");
}

}  // namespace
}  // namespace mt
