// The flags that take one of a fixed set of names (FlagSet::add_choice, issue #27) are parsed
// into their enums once, from the command line or the config file: a name outside the set is
// refused with the same message from either source, and --print-config writes the name back.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "cli_fixture.h"
#include "run_binary.h"

namespace mt {
namespace {

using testing::expect_usage_error;
using testing::Fixture;
using testing::run_meshtrain;
using testing::RunResult;

struct ChoiceCase {
  std::string section, key, flag, bad, message;
};

std::vector<ChoiceCase> choice_cases() {
  return {
      {"train", "recompute", "--recompute", "some",
       "--recompute must be none, selective or full (got 'some')"},
      {"train", "precision", "--precision", "fp16",
       "--precision must be fp32 or bf16 (got 'fp16')"},
      {"train", "lr-schedule", "--lr-schedule", "linear",
       "--lr-schedule must be constant or cosine (got 'linear')"},
      {"io", "export-dtype", "--export-dtype", "f16",
       "--export-dtype must be fp32 or bf16 (got 'f16')"},
      {"io", "checkpoint-format", "--checkpoint-format", "zip",
       "--checkpoint-format must be global or sharded (got 'zip')"},
  };
}

TEST(ChoiceFlags, ABadNameIsRefusedAlikeOnTheCommandLineAndInTheConfigFile) {
  Fixture f;
  const std::string config = f.dir / "choice.toml";
  for (const ChoiceCase& c : choice_cases()) {
    SCOPED_TRACE(c.flag);
    expect_usage_error(run_meshtrain(f.base() + " " + c.flag + " " + c.bad), c.message);
    std::ofstream(config) << "[" << c.section << "]\n" << c.key << " = '" << c.bad << "'\n";
    expect_usage_error(run_meshtrain(f.base() + " --config " + config), c.message);
  }
}

TEST(ChoiceFlags, AConfigFilesNameReachesTheRunAsTheFlagsDoes) {
  Fixture f;
  const std::string config = f.dir / "choice.toml";
  std::ofstream(config) << "[train]\nrecompute = 'selective'\nprecision = 'fp32'\n";
  const RunResult from_file = run_meshtrain("train --config " + config + " --print-config");
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  const RunResult from_flags =
      run_meshtrain("train --recompute selective --precision fp32 --print-config");
  ASSERT_EQ(from_flags.exit_code, 0) << from_flags.err;
  EXPECT_NE(from_file.out.find("recompute = 'selective'"), std::string::npos) << from_file.out;
  EXPECT_NE(from_file.out.find("precision = 'fp32'"), std::string::npos) << from_file.out;
  // --config itself is printed; everything else must agree.
  auto without_config = [](std::string s) {
    const size_t at = s.find("config = ");
    if (at != std::string::npos) s.erase(at, s.find('\n', at) - at);
    return s;
  };
  EXPECT_EQ(without_config(from_file.out), without_config(from_flags.out));
}

}  // namespace
}  // namespace mt
