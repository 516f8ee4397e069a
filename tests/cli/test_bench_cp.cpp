// `meshtrain bench cp` (docs/context_parallel.md, "Benchmarks"): the table's header and one
// row per (sequence, K/V mode), and its bad input. Checks that it runs, never how fast.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "run_binary.h"

namespace mt {
namespace {

using testing::run_meshtrain;

TEST(BenchCp, PrintsOneRowPerSequenceAndMode) {
  auto r = run_meshtrain(
      "bench cp --ranks 2 --seq 64,128 --heads 4 --kv-heads 2 --head-dim 16 --iters 1 "
      "--repeats 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("kv_bytes"), std::string::npos) << r.out;
  std::istringstream in(r.out);
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string seq, comm;
    int64_t bytes = 0;
    if (line.empty() || line[0] == '#' || !(words >> seq >> comm >> bytes)) continue;
    ++rows;
    // b 1 x T/2 rows x [K | V] of 2 kv heads x 16, fp32.
    EXPECT_EQ(bytes, std::stoi(seq) / 2 * 2 * 2 * 16 * 4) << line;
    EXPECT_TRUE(comm == "ring" || comm == "allgather") << line;
  }
  EXPECT_EQ(rows, 4) << r.out;
}

TEST(BenchCp, RefusesASequenceTheZigzagCannotCut) {
  auto r = run_meshtrain("bench cp --ranks 2 --seq 63");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("meshtrain: error: --seq 63 must be divisible by 2 x --ranks = 4"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace mt
