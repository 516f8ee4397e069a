// `meshtrain bench gemm --precision fp32|bf16 --repeat N --seconds S`: every reading printed,
// then their min / median / max, and the one whole-team line scripts read; bad input refused
// before anything is measured. No rate is asserted (the machine is shared); the summary must
// be the readings' own min, median and max.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "cli_fixture.h"
#include "kernels/matmul_bf16.h"

namespace mt::testing {
namespace {

// The per-thread figures of the "reading i of n:" lines, in order.
std::vector<double> readings_of(const std::string& out, const std::string& precision) {
  std::vector<double> v;
  const std::regex line("reading ([0-9]+) of ([0-9]+): " + precision +
                        " GEMM peak ([0-9.]+) GFLOP/s per thread \\(");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it) {
    EXPECT_EQ(std::stoi((*it)[1]), int(v.size()) + 1) << out;
    v.push_back(std::stod((*it)[3]));
  }
  return v;
}

// The spread line's min, median and max, and the whole-team line's figure.
void expect_summary_of(const std::string& out, const std::string& precision,
                       std::vector<double> readings, int threads) {
  std::smatch m;
  const std::regex spread(precision +
                          " GEMM peak per thread over ([0-9]+) reading\\(s\\) of "
                          "[0-9.]+ s: min ([0-9.]+), median ([0-9.]+), max ([0-9.]+)");
  ASSERT_TRUE(std::regex_search(out, m, spread)) << out;
  std::sort(readings.begin(), readings.end());
  const size_t n = readings.size();
  const double median = n % 2 ? readings[n / 2] : 0.5 * (readings[n / 2 - 1] + readings[n / 2]);
  EXPECT_EQ(std::stoul(m[1]), n);
  // Printed with one decimal: within rounding of the readings' own figures.
  EXPECT_NEAR(std::stod(m[2]), readings.front(), 0.051) << out;
  EXPECT_NEAR(std::stod(m[3]), median, 0.051) << out;
  EXPECT_NEAR(std::stod(m[4]), readings.back(), 0.051) << out;
  const std::regex team(precision + " GEMM peak: ([0-9.]+) GFLOP/s with " +
                        std::to_string(threads) + " thread\\(s\\), the best reading\n");
  ASSERT_TRUE(std::regex_search(out, m, team)) << out;
  EXPECT_NEAR(std::stod(m[1]), readings.back() * threads, 0.051 * threads + 0.051) << out;
}

TEST(BenchGemm, RepeatPrintsEachReadingThenTheirMinMedianAndMax) {
  const RunResult r = run_meshtrain("bench gemm --repeat 3 --seconds 0.02");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<double> v = readings_of(r.out, "fp32");
  ASSERT_EQ(v.size(), 3u) << r.out;
  for (double g : v) EXPECT_GT(g, 0) << r.out;
  EXPECT_NE(r.out.find("(oneDNN sgemm, best run "), std::string::npos) << r.out;
  expect_summary_of(r.out, "fp32", v, 1);
}

TEST(BenchGemm, Bf16PrecisionTimesTheBf16RoutineAtTwoThreads) {
  if (!bf16_matmul_supported()) {
    expect_usage_error(run_meshtrain("bench gemm --precision bf16 --seconds 0.02"),
                       "--precision bf16 needs a CPU on which oneDNN runs bf16 matmuls");
    return;
  }
  const RunResult r =
      run_meshtrain("bench gemm --precision bf16 --threads 2 --repeat 2 --seconds 0.02");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<double> v = readings_of(r.out, "bf16");
  ASSERT_EQ(v.size(), 2u) << r.out;
  // The routine the bf16 linears run, named as the breakdown and the mfu line name it.
  const std::string kernel = std::string("(").append(matmul_bf16_isa()).append(", best run ");
  EXPECT_NE(r.out.find(kernel), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("fp32 GEMM peak"), std::string::npos) << r.out;
  expect_summary_of(r.out, "bf16", v, 2);
}

TEST(BenchGemm, RefusesBadInputBeforeMeasuring) {
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--precision fp16", "--precision must be fp32 or bf16 (got 'fp16')"},
           {"--repeat 0", "--repeat must be in 1..1000 (got 0)"},
           {"--repeat 1001", "--repeat must be in 1..1000 (got 1001)"},
           {"--repeat -1", "--repeat must be in 1..1000"},
           {"--seconds 0", "--seconds must be > 0 and <= 600 (got 0)"},
           {"--seconds 601", "--seconds must be > 0 and <= 600"},
           {"--seconds nan", "--seconds must be a finite number"},
           {"--threads 0", "--threads must be in 1..256"}}) {
    const RunResult r = run_meshtrain("bench gemm " + args);
    expect_usage_error(r, message);
    EXPECT_EQ(r.out.find("reading"), std::string::npos) << args << r.out;
  }
}

}  // namespace
}  // namespace mt::testing
