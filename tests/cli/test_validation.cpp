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
#include "data/token_shard.h"
#include "run_binary.h"
#include "train/checkpoint/save_lock.h"

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
      {"--timeout 0", "--timeout must be > 0 and <= 1000000 (got 0)"},
      // model (ModelConfig::validate)
      {"--layers 0", "--layers must be in 1..4096 (got 0)"},
      {"--dim 0", "--dim must be in 1..65536 (got 0)"},
      {"--heads 0", "--heads must be in 1..65536 (got 0)"},
      {"--seq 0", "--seq must be in 1..1048576 (got 0)"},
      {"--vocab 1", "--vocab must be in 2..2147483647 (got 1)"},
      {"--heads 3", "--heads 3 does not divide --dim 16"},
      {"--experts -1", "--experts must be in 0..4096 (got -1)"},
      {"--experts 4 --topk 5", "--topk must be in 1..--experts (got 5)"},
      {"--experts 4 --moe-every 0", "--moe-every must be in 1..4096 (got 0)"},
      {"--experts 4 --capacity-factor -1", "--capacity-factor must be between 0 and"},
      // optimizer
      {"--steps -1", "--steps must be in 0..1000000000 (got -1)"},
      {"--batch 0", "--batch must be in 1..1048576 (got 0)"},
      {"--lr 0", "--lr must be > 0"},
      {"--min-lr -1", "--min-lr must be between 0 and"},
      {"--warmup -1", "--warmup must be in 0..1000000000 (got -1)"},
      {"--lr-schedule linear", "--lr-schedule must be constant or cosine (got 'linear')"},
      {"--recompute attention", "--recompute must be none, selective or full (got 'attention')"},
      {"--precision fp16", "--precision must be fp32 or bf16 (got 'fp16')"},
      {"--export-dtype f16", "--export-dtype must be fp32 or bf16 (got 'f16')"},
      {"--weight-decay -1", "--weight-decay must be between 0 and"},
      {"--grad-clip -1", "--grad-clip must be between 0 and"},
      {"--beta1 1", "--beta1 and --beta2 must be in [0, 1)"},
      {"--beta2 -0.5", "--beta2 must be between 0 and 1 (got -0.5)"},
      {"--eps 0", "--eps must be > 0"},
      {"--threads 0", "--threads must be in 1.."},
      {"--peak-gflops -5", "--peak-gflops must be between 0 and 1000000 (got -5)"},
      {"--peak-gflops inf", "--peak-gflops must be a finite number"},
      {"--eval-every -1", "--eval-every must be in 0..1000000000 (got -1)"},
      {"--eval-batches 0", "--eval-batches must be in 1..1000000 (got 0)"},
      // layout and divisibility
      {"--dp 0", "--dp must be in 1..1048576 (got 0)"},
      {"--tp 0", "--tp must be in 1..1048576 (got 0)"},
      {"--pp 0", "--pp must be in 1..1048576 (got 0)"},
      {"--ep 0", "--ep must be in 1..1048576 (got 0)"},
      {"--microbatches 0", "--microbatches must be in 1..1048576 (got 0)"},
      {"--virtual-stages 0", "--virtual-stages must be in 1..4096 (got 0)"},
      {"--zero 4", "--zero must be in 0..3 (got 4)"},
      {"--bucket-mb 0", "--bucket-mb must be > 0"},
      {"--dp 1025 --batch 1025", "= 1025 ranks is more than the 1024 threads one process runs"},
      {"--batch 3 --microbatches 2", "--batch 3 must be divisible by --dp x --microbatches = 2"},
      {"--tp 4", "--tp 4 does not divide --heads 2"},
      {"--tp 2 --sequence-parallel --batch 1 --seq 7",
       "--sequence-parallel needs the 7 token rows"},
      // experts (these fired inside the ranks, in block.cpp, moe_layer.cpp, trainer.cpp and
      // data_parallel.cpp, before the rules were gathered)
      {"--dp 2 --ep 2", "--ep 2 needs --experts > 0"},
      {"--moe-overlap-parts 2", "--moe-overlap-parts 2 needs --experts > 0"},
      {"--experts 4 --moe-overlap-parts 0", "--moe-overlap-parts must be in 1..1024 (got 0)"},
      {"--experts 4 --ep 2", "--ep 2 must divide --dp 1"},
      {"--dp 2 --ep 2 --experts 3", "--ep 2 must divide --experts 3"},
      {"--experts 4 --tp 2 --batch 1 --seq 7",
       "--experts with --tp 2 splits each microbatch's 7 token rows"},
      {"--experts 4 --router sigmoid", "--router sigmoid is a --arch llama setting"},
      {"--arch llama --shared-experts 1", "--shared-experts has no effect without --experts E > 0"},
      {"--arch llama --experts 4 --layers 2 --first-dense-layers 2",
       "makes no block a mixture of experts"},
      {"--arch llama --experts 4 --tp 2 --shared-experts 1 --expert-ffn-dim 33",
       "--tp 2 does not divide the shared experts' width"},
      // pipeline (the schedule's and --stage-layers' rules)
      {"--schedule bogus",
       "unknown --schedule 'bogus' (expected gpipe, 1f1b, interleaved, zb-h1 or dualpipev)"},
      {"--pp 2 --schedule interleaved",
       "--schedule interleaved needs --virtual-stages >= 2 (got 1)"},
      {"--pp 2 --schedule interleaved --virtual-stages 2 --microbatches 1",
       "--schedule interleaved needs --microbatches (1) to be a multiple of --pp (2)"},
      {"--pp 2 --virtual-stages 2", "--virtual-stages 2 applies only to --schedule interleaved"},
      {"--pp 2 --stage-layers 1,x", "--stage-layers '1,x': 'x' is not an integer"},
      {"--pp 2 --stage-layers 2,0", "2 is not a layer count between 0 and --layers (1)"},
      {"--pp 2 --stage-layers 1", "has 1 entries; it needs one per pipeline chunk"},
      {"--layers 2 --pp 2 --stage-layers 1,0", "--stage-layers '1,0' sums to 1, not --layers (2)"},
      {"--pp 2 --schedule dualpipev --microbatches 2",
       "--schedule dualpipev needs --microbatches (2) >= 2 x --pp (4)"},
      {"--pp 2 --schedule dualpipev --microbatches 4 --batch 4 --virtual-stages 3",
       "--schedule dualpipev places 2 chunks on every stage (the V); drop --virtual-stages or "
       "give 2 (got 3)"},
      {"--pp 2 --schedule dualpipev --microbatches 4 --batch 4 --stage-layers 1,0",
       "has 2 entries; it needs one per pipeline chunk: --pp x chunks per stage = 4"},
      // io
      {"--save-every -1", "--save-every must be in 0..1000000000 (got -1)"},
      {"--sample-tokens -1", "--sample-tokens must be in 0..1000000 (got -1)"},
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
  // Under a launcher only its rank 0 prints a usage error. The others exit 0 silently: an
  // exit 2 could make the launcher end the job before rank 0 has printed (issue #26). (Here
  // MPI finds no launcher to agree through, so the rule of cli_main applies.)
  const RunResult other =
      run_command("OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 " + std::string(MESHTRAIN_BIN) +
                  " " + f.base() + " --backend mpi --dp 4 --batch 4");
  EXPECT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(other.err, "");
  EXPECT_EQ(other.out, "");
}

// Issue #26: rules that used to fire inside the ranks (exit 1 from an internal check, or a
// usage error after the ranks had started and allocated) are found before them: the held
// lock is the witness, taken after these checks and before any rank.
TEST(Validation, RulesFoundInsideTheRanksAreFoundBeforeThem) {
  LockedFixture f;
  std::vector<int> few, wide;
  for (int i = 0; i < 10; ++i) few.push_back(i);
  for (int i = 0; i < 400; ++i) wide.push_back(i % 2 ? 300 : i % 256);
  const std::string small_val = f.dir / "small_val.bin", wide_val = f.dir / "wide_val.bin";
  write_token_shard(small_val, few);
  write_token_shard(wide_val, wide);
  const std::vector<Case> cases = {
      // executor.cpp: "check failed: s_.model_chunks() <= 128" (exit 1)
      {"--layers 130 --pp 2 --schedule interleaved --virtual-stages 65 --microbatches 2",
       "--pp x --virtual-stages = 130 model chunks is more than the 128 a pipeline can address"},
      // communicator.cpp: "check failed: microbatch < 65536" (exit 1)
      {"--pp 2 --layers 2 --microbatches 65537 --batch 65537 --seq 1",
       "--microbatches 65537 is more than the 65536 a pipeline (--pp > 1) can address"},
      // token_permutation.cpp: a capacity beyond int (undefined behaviour)
      {"--experts 4 --capacity-factor 3e38",
       "--capacity-factor 3e+38 gives each expert a capacity"},
      // The data loaders, inside the ranks.
      {"--vocab 100", "--data " + f.data +
                          " holds token id 105 (token 15, the first id outside the vocabulary) "
                          "but the model vocab is 100"},
      {"--seq 256", "--data " + f.data + " holds 400 tokens, fewer than one batch needs"},
      {"--eval-every 1 --val-data " + small_val,
       "--val-data " + small_val + " holds 10 tokens, fewer than one batch needs"},
      {"--eval-every 1 --val-data " + wide_val,
       "--val-data " + wide_val +
           " holds token id 300 (token 1, the first id outside the vocabulary) but the model "
           "vocab is 256"},
  };
  for (const Case& c : cases)
    expect_refused_before_ranks(run_meshtrain(f.base() + " " + c.flags), c.needle, c.flags);
}

// Issue #26: a flag that configures something the run does not do is refused before any
// rank starts, naming the flag it needs (it used to be ignored without a word: --save-sync
// without --save). No --save here, so the witness is the banner alone.
TEST(Validation, FlagsWithoutWhatTheyConfigureRefuseBeforeAnyRankStarts) {
  Fixture f;
  const std::vector<Case> dependent = {
      {"--checkpoint-format sharded --save-sync", "--save-sync has no effect without --save DIR"},
      {"--save-every 1", "--save-every has no effect without --save DIR"},
      {"--checkpoint-format sharded", "--checkpoint-format has no effect without --save DIR"},
      {"--report-every 1", "--report-every has no effect without --metrics FILE"},
      {"--export-dtype bf16", "--export-dtype has no effect without --export FILE"},
      {"--prompt Once", "--prompt has no effect without --sample-tokens N > 0"},
      {"--eval-batches 2", "--eval-batches has no effect without --eval-every N > 0"},
      {"--dp 2 --outer-lr 0.5", "--outer-lr has no effect without --dp-sync diloco:H"},
      {"--dp 2 --dp-sync local:2 --outer-momentum 0.5",
       "--outer-momentum has no effect without --dp-sync diloco:H"},
      {"--topk 1", "--topk has no effect without --experts E > 0"},
      {"--aux-loss-coef 0.1", "--aux-loss-coef has no effect without --experts E > 0"},
      {"--schedule gpipe", "--schedule has no effect without --pp > 1"},
      {"--virtual-stages 2", "--virtual-stages has no effect without --pp > 1"},
      {"--stage-layers 1", "--stage-layers has no effect without --pp > 1"},
      {"--sequence-parallel", "--sequence-parallel has no effect without --tp > 1"},
      // The data decides these two: the fixture's --data is one shard, with no validation
      // split.
      {"--val-data " + f.data, "--val-data has no effect without --eval-every N > 0"},
      {"--eval-every 1", "--eval-every 1 needs validation data: give --val-data FILE|DIR"},
  };
  for (const Case& c : dependent)
    expect_refused_before_ranks(run_meshtrain(loud_base(f) + " " + c.flags), c.needle, c.flags);
  // With what they need, the same settings run.
  const RunResult ok = run_meshtrain(f.base() + " --steps 1 --val-data " + f.data +
                                     " --eval-every 1 --eval-batches 2");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  // --min-lr with the constant schedule changes nothing but is passed by scripts for either
  // schedule: a warning, and the run goes on.
  const RunResult warned =
      run_meshtrain(loud_base(f) + " --steps 1 --lr-schedule constant --min-lr 0");
  EXPECT_EQ(warned.exit_code, 0) << warned.err;
  EXPECT_NE(warned.err.find("meshtrain: warning: --min-lr 0 has no effect with --lr-schedule "
                            "constant"),
            std::string::npos)
      << warned.err;
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
