// `meshtrain bench step --breakdown` and `bench comm --under-compute` (issue #33): they run,
// print every row, and refuse bad input before any rank starts. No timing is asserted.
#include <gtest/gtest.h>

#include "cli_fixture.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/matmul_bf16.h"

namespace mt::testing {
namespace {

TEST(BenchCommands, StepBreakdownPrintsEveryPhase) {
  Fixture f;
  const RunResult r =
      run_meshtrain("bench step --breakdown" + f.tiny + "--steps 3 --data " + f.data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("step breakdown (rank 0, 2 step(s) after a warm-up, 1 thread(s))"),
            std::string::npos)
      << r.out;
  for (const char* phase : {"gemm", "attention", "norm", "activation", "optimizer", "conversion",
                            "embedding", "comm wait", "framework", "fp32 GEMM peak"})
    EXPECT_NE(r.out.find(std::string("\n  ") + phase), std::string::npos) << phase << r.out;
  // Which attention kernel ran (fp32, head dim 8: the sgemm path).
  EXPECT_NE(r.out.find("\n  attention core: fp32 oneDNN sgemm per head\n"), std::string::npos)
      << r.out;
  // The mfu denominator says how it was measured (kernels/gemm_peak.h, one method).
  EXPECT_NE(r.out.find("after a warm-up, wall time, 1 thread(s)): the mfu denominator"),
            std::string::npos)
      << r.out;
  // The cpu columns and the rank thread's cpu line, which a loaded machine does not inflate.
  EXPECT_NE(r.out.find(" roof/t    cpu ms roof/cpu\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  rank thread cpu "), std::string::npos) << r.out;
}

// Under bf16 the breakdown names the dense linears' GEMM kernel that ran: the packed AMX
// tiles where the CPU has AMX, oneDNN's routine elsewhere (kernels/dense_gemm_bf16.h).
TEST(BenchCommands, Bf16StepBreakdownNamesTheDenseGemmKernel) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  Fixture f;
  const RunResult r = run_meshtrain("bench step --breakdown --precision bf16" + f.tiny +
                                    "--steps 3 --data " + f.data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // --threads 1 (the default): the rank's team is one thread.
  const std::string isa = dense_bf16_isa(dense_bf16_default_path(1));
  EXPECT_NE(r.out.find("; bf16 GEMMs: " + isa + "\n"), std::string::npos) << r.out;
  // The header stays whole after the long kernel names: the peak's line ends as it should.
  EXPECT_NE(r.out.find("thread(s)): the mfu denominator\n"), std::string::npos) << r.out;
}

// Each rank's step, forward+backward, comm wait and thread cpu (issue #33, stop 42): the
// ranks of a dp 2 step wait for each other, so which one is slower (and which waits) shows.
TEST(BenchCommands, StepBreakdownPrintsALinePerRank) {
  Fixture f;
  const RunResult r =
      run_meshtrain("bench step --breakdown --dp 2" + f.tiny + "--steps 3 --data " + f.data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\n  per rank (ms/step, means; median step and wait): step, "
                       "forward+backward, comm wait, thread cpu\n"),
            std::string::npos)
      << r.out;
  for (const char* rank : {"\n    rank 0: step ", "\n    rank 1: step "})
    EXPECT_NE(r.out.find(rank), std::string::npos) << rank << r.out;
  EXPECT_EQ(r.out.find("rank 2:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", median comm wait "), std::string::npos) << r.out;
}

TEST(BenchCommands, StepWithoutBreakdownTrainsAsTrainDoes) {
  Fixture f;
  const RunResult r = run_meshtrain("bench step" + f.tiny + "--data " + f.data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("step breakdown"), std::string::npos) << r.out;
}

TEST(BenchCommands, UnderComputeReportsAddedTimeAndSwitches) {
  const RunResult r =
      run_meshtrain("bench comm --under-compute --gemm-us 50 --repeats 1 --iters 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* key : {"added_us ", "iteration_with_us ", "iteration_without_us ",
                          "voluntary_switches_per_iteration_with ", "check ok"})
    EXPECT_NE(r.out.find(key), std::string::npos) << key << r.out;
}

TEST(BenchCommands, UnderComputeRefusesBadInput) {
  expect_usage_error(run_meshtrain("bench comm --under-compute --gemm-us 0"),
                     "--gemm-us must be in 1..1000000");
  expect_usage_error(run_meshtrain("bench comm --under-compute --count 0"),
                     "--count must be in 1..67108864");
  expect_usage_error(run_meshtrain("bench comm --under-compute --backend mpi"),
                     "--under-compute needs --backend local");
}

}  // namespace
}  // namespace mt::testing
