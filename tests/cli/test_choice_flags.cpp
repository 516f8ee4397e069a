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
      {"engine", "backend", "--backend", "nccl", "--backend must be local or mpi (got 'nccl')"},
      {"engine", "bind", "--bind", "socket",
       "--bind must be auto, cores or none (got 'socket')"},
      {"parallel", "cp-comm", "--cp-comm", "p2p",
       "--cp-comm must be ring or allgather (got 'p2p')"},
      {"parallel", "dp-sync", "--dp-sync", "local:0",
       "--dp-sync must be every-step, local:H or diloco:H with H >= 1 (got 'local:0')"},
      {"io", "resume", "--resume", "newest", "--resume must be auto (got 'newest')"},
      {"parallel", "schedule", "--schedule", "2f2b",
       "unknown --schedule '2f2b' (expected gpipe, 1f1b, interleaved, zb-h1 or dualpipev)"},
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

// The other commands' choices are parsed as they are read too, in the words they had.
TEST(ChoiceFlags, OtherCommandsRefuseABadNameAlike) {
  Fixture f;
  expect_usage_error(run_meshtrain("export --from " + (f.dir / "none") + " --to " +
                                   (f.dir / "w.safetensors") + " --export-dtype f16"),
                     "--export-dtype must be fp32 or bf16 (got 'f16')");
  expect_usage_error(run_meshtrain("bench comm --backend nccl"), "--backend must be local or mpi");
  expect_usage_error(run_meshtrain("bench comm --op all_sum"),
                     "--op must be all_reduce, reduce_scatter, all_gather, all_to_all or "
                     "broadcast (got 'all_sum')");
  expect_usage_error(run_meshtrain("schedule --schedule 2f2b"),
                     "unknown --schedule '2f2b' (expected gpipe, 1f1b, interleaved, zb-h1 or "
                     "dualpipev)");
}

TEST(ChoiceFlags, AConfigFilesNameReachesTheRunAsTheFlagsDoes) {
  Fixture f;
  const std::string config = f.dir / "choice.toml";
  std::ofstream(config) << "[train]\nrecompute = 'selective'\nprecision = 'fp32'\n"
                        << "[parallel]\nschedule = 'zb-h1'\ndp-sync = 'local:4'\n"
                        << "cp-comm = 'allgather'\n[engine]\nbackend = 'mpi'\n"
                        << "[io]\nresume = 'auto'\n";
  const RunResult from_file = run_meshtrain("train --config " + config + " --print-config");
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  const RunResult from_flags = run_meshtrain(
      "train --recompute selective --precision fp32 --schedule zb-h1 --dp-sync local:4 "
      "--cp-comm allgather --backend mpi --resume auto --print-config");
  ASSERT_EQ(from_flags.exit_code, 0) << from_flags.err;
  for (const char* line :
       {"recompute = 'selective'", "precision = 'fp32'", "schedule = 'zb-h1'",
        "dp-sync = 'local:4'", "cp-comm = 'allgather'", "backend = 'mpi'", "resume = 'auto'"})
    EXPECT_NE(from_file.out.find(line), std::string::npos) << line << "\n" << from_file.out;
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
