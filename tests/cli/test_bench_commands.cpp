// `meshtrain bench step --breakdown` and `bench comm --under-compute` (issue #33): they run,
// print every row, and refuse bad input before any rank starts. No timing is asserted.
#include <gtest/gtest.h>

#include "cli_fixture.h"
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
}

// Which fusions ran: the norm's residual add always; the GEMM epilogue's under bf16 at tp 1
// without dropout, named with the routine that ran it.
TEST(BenchCommands, StepBreakdownNamesTheFusionsThatRan) {
  Fixture f;
  const RunResult fp32 =
      run_meshtrain("bench step --breakdown" + f.tiny + "--steps 2 --data " + f.data);
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  EXPECT_NE(fp32.out.find("\n  fused: residual add + norm (forward and backward, one pass per "
                          "row)\n"),
            std::string::npos)
      << fp32.out;
  if (!mt::bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  const RunResult bf16 = run_meshtrain("bench step --breakdown --precision bf16" + f.tiny +
                                       "--steps 2 --data " + f.data);
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  const std::string routine = mt::matmul_bf16_path() == mt::Bf16GemmPath::jit_gemm
                                  ? "written ahead of the jit_gemm"
                                  : "oneDNN binary_add post-op";
  EXPECT_NE(bf16.out.find("; residual add in the MLP output GEMM's epilogue (" + routine + ")\n"),
            std::string::npos)
      << bf16.out;
  const RunResult dropout = run_meshtrain("bench step --breakdown --precision bf16 --dropout 0.1" +
                                          f.tiny + "--steps 2 --data " + f.data);
  ASSERT_EQ(dropout.exit_code, 0) << dropout.err;
  EXPECT_EQ(dropout.out.find("GEMM's epilogue"), std::string::npos) << dropout.out;
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
