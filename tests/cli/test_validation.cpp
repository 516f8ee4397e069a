// One bad-input case per rule of validate_train_options (train/validate_options.h), run
// through the binary: exit 2, one "meshtrain: error:" line naming the flag, and no rank
// started. Two witnesses of the last: the runs are not --quiet, so a rank that started
// would have printed the "meshtrain: GPT ..." banner on stdout; and the test holds the lock
// of the run's --save directory, which run_training takes after the validation and before
// the ranks, so a run that got past the validation fails on the lock with another message
// (a rule firing inside a rank could otherwise print the very same line).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_fixture.h"
#include "run_binary.h"
#include "train/save_lock.h"

namespace mt {
namespace {

using testing::expect_usage_error;
using testing::Fixture;
using testing::run_command;
using testing::run_meshtrain;
using testing::RunResult;

// The fixture's tiny model, with progress output on.
std::string loud_base(const Fixture& f) {
  return "train --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --steps 2 --data " + f.data;
}

// The tiny model saving to a directory whose lock this test holds.
struct LockedFixture : Fixture {
  std::string held = dir / "held";
  SaveDirLock lock{held};
  std::string base() const { return loud_base(*this) + " --save " + held; }
};

// As if this process were one of `size` started by Open MPI's mpirun: the launcher's size
// is read from the environment before MPI is initialised, so no MPI is needed to test it.
RunResult run_as_launched(int size, const std::string& args) {
  return run_command("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=" + std::to_string(size) + " " +
                     MESHTRAIN_BIN + " " + args);
}

void expect_refused_before_ranks(const RunResult& r, const std::string& needle,
                                 const std::string& what) {
  SCOPED_TRACE(what);
  expect_usage_error(r, needle);
  EXPECT_EQ(r.out, "") << "a rank started";
}

struct Case {
  std::string flags;   // added to the tiny model's command line
  std::string needle;  // a part of the one error line
};

// Grouped as validate_train_options groups its rules.
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // engine
      {"--backend nccl", "--backend must be local or mpi (got 'nccl')"},
      {"--timeout 0", "--timeout must be > 0 seconds"},
      // model (ModelConfig::validate)
      {"--layers 0", "--layers must be >= 1 (got 0)"},
      {"--dim 0", "--dim must be >= 1 (got 0)"},
      {"--heads 0", "--heads must be >= 1 (got 0)"},
      {"--seq 0", "--seq must be >= 1 (got 0)"},
      {"--vocab 1", "--vocab must be in 2..2147483647 (got 1)"},
      {"--heads 3", "--heads 3 does not divide --dim 16"},
      {"--experts -1", "--experts must be >= 0 (got -1)"},
      {"--experts 4 --topk 5", "--topk must be in 1..--experts (got 5)"},
      {"--experts 4 --moe-every 0", "--moe-every must be >= 1 (got 0)"},
      {"--experts 4 --capacity-factor -1", "--capacity-factor must be >= 0"},
      // optimizer
      {"--steps -1", "--steps must be >= 0 (got -1)"},
      {"--batch 0", "--batch must be >= 1 (got 0)"},
      {"--lr 0", "--lr must be > 0"},
      {"--min-lr -1", "--min-lr must be >= 0"},
      {"--warmup -1", "--warmup must be >= 0"},
      {"--lr-schedule linear", "--lr-schedule must be constant or cosine (got 'linear')"},
      {"--recompute attention", "--recompute must be none, selective or full (got 'attention')"},
      {"--experts 4 --recompute full", "--recompute full does not support --experts"},
      {"--precision fp16", "--precision must be fp32 or bf16 (got 'fp16')"},
      {"--export-dtype f16", "--export-dtype must be fp32 or bf16 (got 'f16')"},
      {"--weight-decay -1", "--weight-decay must be >= 0"},
      {"--grad-clip -1", "--grad-clip must be >= 0"},
      {"--beta1 1", "--beta1 and --beta2 must be in [0, 1)"},
      {"--beta2 -0.5", "--beta1 and --beta2 must be in [0, 1)"},
      {"--eps 0", "--eps must be > 0"},
      {"--threads 0", "--threads must be in 1.."},
      {"--peak-gflops -5", "--peak-gflops must be > 0 (GFLOP/s per thread), or 0 to measure"},
      {"--peak-gflops inf", "--peak-gflops must be a finite number"},
      {"--eval-every -1", "--eval-every must be >= 0 and --eval-batches >= 1"},
      {"--eval-batches 0", "--eval-every must be >= 0 and --eval-batches >= 1"},
      // layout and divisibility
      {"--dp 0", "--dp must be >= 1 (got 0)"},
      {"--tp 0", "--tp must be >= 1 (got 0)"},
      {"--pp 0", "--pp must be >= 1 (got 0)"},
      {"--ep 0", "--ep must be >= 1 (got 0)"},
      {"--microbatches 0", "--microbatches must be >= 1 (got 0)"},
      {"--virtual-stages 0", "--virtual-stages must be >= 1 (got 0)"},
      {"--zero 4", "--zero must be 0, 1, 2 or 3 (got 4)"},
      {"--bucket-mb 0", "--bucket-mb must be > 0"},
      {"--dp 1025 --batch 1025", "= 1025 ranks is more than the 1024 threads one process runs"},
      {"--batch 3 --microbatches 2", "--batch 3 must be divisible by --dp x --microbatches = 2"},
      {"--tp 4", "--tp 4 does not divide --heads 2"},
      {"--tp 2 --sequence-parallel --batch 1 --seq 7",
       "--sequence-parallel needs the 7 token rows"},
      // experts (these fired inside the ranks, in block.cpp, moe_layer.cpp, trainer.cpp and
      // data_parallel.cpp, before the rules were gathered)
      {"--dp 2 --ep 2", "--ep 2 needs --experts > 0"},
      {"--experts 4 --ep 2", "--ep 2 must divide --dp 1"},
      {"--dp 2 --ep 2 --experts 3", "--ep 2 must divide --experts 3"},
      {"--dp 2 --ep 2 --experts 4 --zero 3", "--ep 2 supports --zero 0, 1 or 2 (got --zero 3"},
      {"--experts 4 --tp 2", "--experts needs --tp 1"},
      // pipeline (the schedule's and --stage-layers' rules)
      {"--schedule bogus",
       "unknown --schedule 'bogus' (expected gpipe, 1f1b, interleaved or zb-h1)"},
      {"--pp 2 --schedule interleaved",
       "--schedule interleaved needs --virtual-stages >= 2 (got 1)"},
      {"--pp 2 --schedule interleaved --virtual-stages 2 --microbatches 1",
       "--schedule interleaved needs --microbatches (1) to be a multiple of --pp (2)"},
      {"--pp 2 --virtual-stages 2", "--virtual-stages 2 applies only to --schedule interleaved"},
      {"--pp 2 --stage-layers 1,x", "--stage-layers '1,x': 'x' is not an integer"},
      {"--pp 2 --stage-layers 2,0", "2 is not a layer count between 0 and --layers (1)"},
      {"--pp 2 --stage-layers 1", "has 1 entries; it needs one per pipeline chunk"},
      {"--layers 2 --pp 2 --stage-layers 1,0", "--stage-layers '1,0' sums to 1, not --layers (2)"},
      // io
      {"--save-every -1", "--save-every must be >= 0"},
      {"--sample-tokens -1", "--sample-tokens must be >= 0"},
  };
  return all;
}

TEST(Validation, AGoodRunReachesTheLockAndTheRanks) {
  // The controls for both witnesses: the same command line, unchanged, stops at the held
  // lock, and without --save starts its ranks and prints the banner.
  LockedFixture f;
  expect_usage_error(run_meshtrain(f.base()),
                     "--save " + f.held + " is being written by another run");
  const RunResult r = run_meshtrain(loud_base(f) + " --steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("meshtrain: GPT"), std::string::npos) << r.out;
}

TEST(Validation, EveryRuleRefusesBeforeAnyRankStarts) {
  LockedFixture f;
  for (const Case& c : cases())
    expect_refused_before_ranks(run_meshtrain(f.base() + " " + c.flags), c.needle, c.flags);
}

TEST(Validation, LauncherSizeIsCheckedBeforeMpiStarts) {
  LockedFixture f;
  // A local-backend run started as several processes.
  expect_refused_before_ranks(run_as_launched(2, f.base()),
                              "this process is one of 2 started by Open MPI (mpirun), but "
                              "--backend is local",
                              "local backend under mpirun");
  // An MPI run whose layout is not the launched world: found before MPI_Init, not after.
  expect_refused_before_ranks(run_as_launched(2, f.base() + " --backend mpi --dp 4 --batch 4"),
                              "the layout needs --pp x --dp x --tp = 4 ranks but Open MPI "
                              "started 2 processes (set mpirun -np 4 or change the layout)",
                              "mpi world mismatch");
  // Under a launcher only its rank 0 prints a usage error; the others exit 2 silently.
  const RunResult other =
      run_command("OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 " + std::string(MESHTRAIN_BIN) +
                  " " + f.base() + " --backend mpi --dp 4 --batch 4");
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_EQ(other.err, "");
  EXPECT_EQ(other.out, "");
}

TEST(Validation, InputRulesRefuseBeforeAnyRankStarts) {
  LockedFixture f;
  const std::string ck = f.dir / "ck", weights = f.dir / "w.safetensors";
  const RunResult made =
      run_meshtrain(f.Fixture::base() + " --save " + ck + " --export " + weights);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  expect_refused_before_ranks(
      run_meshtrain(f.base() + " --steps 4 --load " + ck + " --init-from " + weights),
      "give one of --load DIR (resume a run: weights, optimizer state, step) or --init-from "
      "FILE (start from weights), not both",
      "--load and --init-from");
  // Read from the checkpoint before the ranks start (it was found while loading, inside them).
  expect_refused_before_ranks(run_meshtrain(f.base() + " --steps 1 --load " + ck),
                              "--load " + ck + " is at step 2, beyond --steps 1",
                              "--load beyond --steps");
}

}  // namespace
}  // namespace mt
