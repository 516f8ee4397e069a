// Every numeric flag of `train` carries the values it accepts (cli/flag_set.h, issue #26):
// a value beyond them is refused by name with the range, whether typed or read from a
// config file, before anything is allocated or waited for. The flags are read from --help,
// so a new one is covered without editing this file.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
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

// (flag, "INT" or "FLOAT") for every numeric flag of `train --help`.
std::vector<std::pair<std::string, std::string>> numeric_flags() {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream help(run_meshtrain("train --help").out);
  const std::regex option(R"(^\s+(--[a-z0-9-]+)\s+(INT|FLOAT)\b)");
  std::smatch m;
  for (std::string line; std::getline(help, line);)
    if (std::regex_search(line, m, option)) out.emplace_back(m[1], m[2]);
  return out;
}

TEST(FlagRanges, TheExamplesOfTheIssueAreRefusedByNameWithTheRange) {
  Fixture f;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--threads 100000", "--threads must be in 1..256 (got 100000)"},
      {"--steps -1", "--steps must be in 0..1000000000 (got -1)"},
      {"--batch 1099511627776", "--batch must be in 1..1048576 (got 1099511627776)"},
      {"--timeout 1e30", "--timeout must be > 0 and <= 1000000 (got 1e+30)"},
      // Used to wrap to 2^64-1 (which a --print-config file could not give back), and to be
      // read as 2 billion layers (a hang) or a width of 2^31 (an allocation failure inside the
      // ranks).
      {"--seed -1", "--seed must be an integer in 0..9223372036854775807 (got '-1')"},
      {"--seed 9223372036854775808",
       "--seed must be in 0..9223372036854775807 (got 9223372036854775808)"},
      {"--layers 2000000000", "--layers must be in 1..4096 (got 2000000000)"},
      {"--dim 2000000000", "--dim must be in 1..65536 (got 2000000000)"},
      // A float hyper-parameter beyond float: inf in the kernels.
      {"--outer-lr 1e39", "--outer-lr must be > 0 and <= 3.402823466e+38 (got 1e+39)"},
      {"--batch abc", "--batch must be an integer in 1..1048576 (got 'abc')"},
      {"--batch 2.5", "--batch must be an integer in 1..1048576 (got '2.5')"},
  };
  for (const auto& [flags, needle] : cases) {
    SCOPED_TRACE(flags);
    expect_usage_error(run_meshtrain(f.base() + " " + flags), needle);
  }
  // In range, the same flags run (a leading '+' is an integer too).
  const RunResult ok = run_meshtrain(f.base() + " --steps +1 --seed 9223372036854775807");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(FlagRanges, EveryNumericFlagIsRefusedBeyondItsRange) {
  Fixture f;
  const auto flags = numeric_flags();
  ASSERT_GE(flags.size(), 40u) << "the --help format changed";
  for (const auto& [flag, type] : flags) {
    SCOPED_TRACE(flag);
    if (type == "INT") {
      // Beyond 64 bits, and far beyond any range.
      expect_usage_error(run_meshtrain(f.base() + " " + flag + " 99999999999999999999"),
                         flag + " must be in ");
      continue;
    }
    for (const char* v : {"inf", "-inf", "nan"})
      expect_usage_error(run_meshtrain(f.base() + " " + flag + " " + v),
                         flag + " must be a finite number");
    expect_usage_error(run_meshtrain(f.base() + " " + flag + " 1e300"), flag + " must be ");
  }
}

TEST(FlagRanges, AConfigFileIsHeldToTheSameRanges) {
  Fixture f;
  const std::string config = f.dir / "big.toml";
  for (const auto& [toml, needle] : std::vector<std::pair<std::string, std::string>>{
           {"[train]\nbatch = 1099511627776\n",
            "[train] batch must be in 1..1048576 (got 1099511627776)"},
           {"[train]\nseed = -1\n", "[train] seed must be in 0..9223372036854775807 (got -1)"},
           {"[engine]\ntimeout = 1e30\n", "--timeout must be > 0 and <= 1000000 (got 1e+30)"},
       }) {
    std::ofstream(config) << toml;
    expect_usage_error(run_meshtrain(f.base() + " --config " + config), needle);
  }
}

// The registry's third use: --print-config writes what --config reads back to the same
// values, strings with newlines, quotes and backslashes included (the default --prompt, a
// newline, used to come back empty, and the rules then refused it).
TEST(FlagRanges, APrintedConfigReadsBackUnchanged) {
  Fixture f;
  const std::string printed = f.dir / "printed.toml";
  const RunResult first = run_meshtrain(
      "train --seed 9223372036854775807 --sample-tokens 2 --prompt 'a\"b\\c\td' --print-config");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::ofstream(printed) << first.out;
  const RunResult again = run_meshtrain("train --config " + printed + " --print-config");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, first.out);
  const RunResult defaults = run_meshtrain("train --print-config");
  std::ofstream(printed) << defaults.out;
  const RunResult run = run_meshtrain(f.base() + " --steps 1 --config " + printed);
  EXPECT_EQ(run.exit_code, 0) << run.err;
}

}  // namespace
}  // namespace mt
