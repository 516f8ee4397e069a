// The report page against hostile metrics files (issue #26): extreme and non-finite values,
// a schedule of any size, corrupt records, a run without steps, and outputs that must not
// be replaced. Each test failed on the code before the fix.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/atomic_file.h"
#include "core/error.h"
#include "report/report_page.h"
#include "test_util/temp_dir.h"
#include "test_util/usage_error.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path, std::ios::binary);
  for (const std::string& l : lines) out << l << "\n";
}

using test_util::usage_error_of;

// Every coordinate an SVG element of the page carries, as text (the markup before the
// page's script, whose text builds tick markup of its own).
std::vector<std::string> coordinates(const std::string& html) {
  const std::string page = html.substr(0, html.find("<script>"));
  std::vector<std::string> out;
  static const std::regex attr(R"re(\b(x|y|x1|x2|y1|y2|cx|cy|width|height)="([^"]*)")re");
  for (std::sregex_iterator it(page.begin(), page.end(), attr), end; it != end; ++it)
    out.push_back((*it)[2]);
  static const std::regex points(R"re(points="([^"]*)")re");
  for (std::sregex_iterator it(page.begin(), page.end(), points), end; it != end; ++it) {
    std::istringstream in((*it)[1].str());
    for (std::string xy; in >> xy;) {
      out.push_back(xy.substr(0, xy.find(',')));
      out.push_back(xy.substr(xy.find(',') + 1));
    }
  }
  return out;
}

// The polyline of the chart with this id: its number of points.
size_t points_in_chart(const std::string& page, const std::string& id) {
  const size_t at = page.find("id=\"" + id + "\"");
  if (at == std::string::npos) return 0;
  const size_t line = page.find("points=\"", at);
  const size_t end = page.find('"', line + 8);
  std::istringstream in(page.substr(line + 8, end - line - 8));
  size_t n = 0;
  for (std::string xy; in >> xy;) ++n;
  return n;
}

TEST(ReportInputs, ExtremeAndNonFiniteValuesDrawFiniteCoordinates) {
  TempDir dir;
  std::vector<std::string> lines = {R"({"event":"run"})"};
  // Finite extremes on both axes (steps too), the strings JSON uses for non-finite numbers,
  // null (how meshtrain writes NaN), and a literal beyond a double.
  const char* values[] = {"1e308",        "-1e308",        "5e-324", "0",   "\"NaN\"",
                          "\"Infinity\"", "\"-Infinity\"", "null",   "1.5", "1e400"};
  const char* steps[] = {"1", "1e308", "2", "3", "4", "5", "6", "7", "-1e308", "9"};
  for (int i = 0; i < 10; ++i) {
    std::string rec = std::string("{\"step\":") + steps[i];
    for (const char* key : {"loss", "val_loss", "lr", "grad_norm", "step_time_s", "tokens_per_s",
                            "mfu", "bubble", "comm_exposed_s"})
      rec += std::string(",\"") + key + "\":" + values[i];
    lines.push_back(rec + ",\"expert_load\":[[" + values[i] + ",1,2]]}");
  }
  lines.push_back(R"({"event":"memory","rank":0,"params_bytes":1e308,"grads_bytes":1e308,)"
                  R"("optimizer_bytes":1e308,"activations_peak_bytes":"NaN"})");
  write_lines(dir / "m.jsonl", lines);
  write_report_page({dir / "m.jsonl"}, dir / "m.html");
  const std::string page = slurp(dir / "m.html");
  for (const std::string& c : coordinates(page)) {
    if (c == "100%") continue;  // the background
    char* end = nullptr;
    const double v = std::strtod(c.c_str(), &end);
    ASSERT_TRUE(end != c.c_str() && *end == '\0' && std::isfinite(v) && std::abs(v) < 1e7)
        << "coordinate '" << c << "'";
  }
  // The finite points are drawn: no chart went blank.
  for (const char* id : {"chart-loss", "chart-lr", "chart-tokens-per-s", "chart-mfu"})
    EXPECT_GE(points_in_chart(page, id), 4u) << id;
  EXPECT_NE(page.find("id=\"chart-memory\""), std::string::npos);
}

TEST(ReportInputs, TicksOfANearlyFlatHugeSeriesEnd) {
  TempDir dir;
  // Values one ulp apart near 1e300: a tick loop that adds its step to 1e300 never moves.
  write_lines(dir / "m.jsonl", {R"({"step":1,"loss":1e300,"lr":1e300})",
                                R"({"step":2,"loss":1.0000000000000002e300,"lr":1e300})"});
  write_report_page({dir / "m.jsonl"}, dir / "m.html");
  EXPECT_GE(points_in_chart(slurp(dir / "m.html"), "chart-loss"), 2u);
}

TEST(ReportInputs, AScheduleOfAnySizeKeepsThePageSmall) {
  TempDir dir;
  write_lines(dir / "m.jsonl",
              {R"({"event":"run","layout":{"pp":4,"microbatches":300000,"schedule":"1f1b"}})",
               R"({"step":1,"loss":2})"});
  write_report_page({dir / "m.jsonl"}, dir / "m.html");
  const std::string page = slurp(dir / "m.html");
  EXPECT_LT(page.size(), 2u << 20);
  EXPECT_NE(page.find("id=\"chart-schedule-0\""), std::string::npos);
  EXPECT_NE(page.find("of the run&#39;s 300000 microbatches"), std::string::npos);
  // Too many stages to draw at all: a sentence instead.
  write_lines(dir / "wide.jsonl",
              {R"({"event":"run","layout":{"pp":100000,"microbatches":100000,"schedule":"gpipe"}})",
               R"({"step":1,"loss":2})"});
  write_report_page({dir / "wide.jsonl"}, dir / "wide.html");
  const std::string wide = slurp(dir / "wide.html");
  EXPECT_LT(wide.size(), 1u << 20);
  EXPECT_NE(wide.find("not drawn"), std::string::npos);
}

// DualPipeV needs 2 pp microbatches: a long run is drawn for fewer, never for too few.
TEST(ReportInputs, ADualPipeVScheduleIsDrawnWithEnoughMicrobatches) {
  TempDir dir;
  write_lines(dir / "m.jsonl",
              {R"({"event":"run","layout":{"pp":4,"microbatches":300000,"schedule":"dualpipev"}})",
               R"({"step":1,"loss":2})"});
  write_report_page({dir / "m.jsonl"}, dir / "m.html");
  const std::string page = slurp(dir / "m.html");
  EXPECT_NE(page.find("id=\"chart-schedule-0\""), std::string::npos);
  EXPECT_EQ(page.find("not drawn"), std::string::npos);
  EXPECT_NE(page.find("F&amp;B pair"), std::string::npos);
  // pp 40: 2048 cells hold 25 microbatches of 80 chunks, fewer than the V needs; the page
  // says it is too large (it drew 51 of 40 stages' single chunks, which dualpipev refused).
  write_lines(dir / "big.jsonl",
              {R"({"event":"run","layout":{"pp":40,"microbatches":1000,"schedule":"dualpipev"}})",
               R"({"step":1,"loss":2})"});
  write_report_page({dir / "big.jsonl"}, dir / "big.html");
  const std::string big = slurp(dir / "big.html");
  EXPECT_NE(big.find("is over what the page draws"), std::string::npos);
  EXPECT_EQ(big.find("needs --microbatches"), std::string::npos);
}

TEST(ReportInputs, MoeLoadOfAnySizeKeepsThePageSmall) {
  TempDir dir;
  std::string wide = R"({"step":1,"expert_load":[[)", many_layers = R"({"step":2,"expert_load":[)";
  for (int e = 0; e < 100000; ++e) wide += (e ? ",1" : "1");
  for (int l = 0; l < 2000; ++l) many_layers += (l ? ",[1]" : "[1]");
  write_lines(dir / "m.jsonl", {wide + "]]}", many_layers + "]}"});
  write_report_page({dir / "m.jsonl"}, dir / "m.html");
  const std::string page = slurp(dir / "m.html");
  EXPECT_LT(page.size(), 2u << 20);
  EXPECT_NE(page.find("The 100000 experts are drawn in groups of 782"), std::string::npos);
  EXPECT_NE(page.find("1984 more MoE layers"), std::string::npos);
  EXPECT_NE(page.find("expert 0-781"), std::string::npos);
}

TEST(ReportInputs, ARunWithoutStepsHasAPageThatSaysSo) {
  TempDir dir;
  write_lines(dir / "m.jsonl", {R"({"event":"run","train":{"steps":0}})"});
  write_report_page({dir / "m.jsonl"}, dir / "m.html");
  EXPECT_NE(slurp(dir / "m.html").find("id=\"no-steps\""), std::string::npos);
}

TEST(ReportInputs, CorruptRecordsAreNamedByLine) {
  TempDir dir;
  const std::string good = R"({"step":1,"loss":2})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"event":5})", "line 2: \"event\" is a number, not a string"},
      {R"({"step":2,"loss":"abc"})", "line 2: \"loss\" is the string \"abc\", not a number"},
      // Only "NaN", "Infinity" and "-Infinity" stand for numbers (docs/report.md), not any case
      // or abbreviation of them.
      {R"({"step":2,"loss":"nan"})", "line 2: \"loss\" is the string \"nan\", not a number"},
      {R"({"step":2,"lr":"-inf"})", "line 2: \"lr\" is the string \"-inf\", not a number"},
      {R"({"step":"INFINITY"})", "line 2: \"step\" is the string \"INFINITY\""},
      {R"({"event":"memory","rank":"x"})", "line 2: a memory record's \"rank\" must be"},
      {R"({"step":2,"expert_load":3})", "line 2: \"expert_load\" must be an array"},
      {R"({"step":"two"})", "line 2: \"step\" is the string"},
      {R"([1,2])", "line 2 is an array, not a record"},
      {R"({"step":2,"loss":)", "line 2 is not valid JSON"},
  };
  for (const auto& [bad, says] : cases) {
    write_lines(dir / "m.jsonl", {good, bad, good});
    const std::string err =
        usage_error_of([&] { write_report_page({dir / "m.jsonl"}, dir / "m.html"); });
    EXPECT_NE(err.find(says), std::string::npos) << bad << " -> " << err;
    EXPECT_EQ(err.find("json.exception"), std::string::npos) << err;
  }
  // A last line without its newline is a record being written: left out.
  std::ofstream(dir / "torn.jsonl") << good << "\n{\"step\":2,\"lo";
  EXPECT_EQ(read_run_metrics(dir / "torn.jsonl").steps.size(), 1u);
}

// 200,000 nested brackets: nlohmann copies values recursively, and the stack ran out.
TEST(ReportInputs, DeeplyNestedRecordsAreRefusedNotCrashedOn) {
  TempDir dir;
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  write_lines(dir / "m.jsonl", {R"({"step":1,"loss":2,"x":)" + deep + "}", R"({"step":2})"});
  EXPECT_NE(usage_error_of([&] { read_run_metrics(dir / "m.jsonl"); }).find("line 1 nests deeper"),
            std::string::npos);
}

TEST(ReportInputs, AFifoIsRefusedNotWaitedOn) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "m.jsonl").c_str(), 0600), 0);
  EXPECT_NE(usage_error_of([&] { read_run_metrics(dir / "m.jsonl"); }).find("FIFO"),
            std::string::npos);
}

TEST(ReportInputs, ThePageReplacesNoDeviceFolderOrInput) {
  TempDir dir;
  write_lines(dir / "m.jsonl", {R"({"step":1,"loss":2})"});
  fs::create_directory(dir / "folder.html");
  EXPECT_NE(usage_error_of([&] {
              write_report_page({dir / "m.jsonl"}, dir / "folder.html");
            }).find("is a directory"),
            std::string::npos);
  EXPECT_NE(usage_error_of([&] {
              write_report_page({dir / "m.jsonl"}, dir / "m.jsonl/no/such/p.html");
            }).find("is a regular file, not a directory"),
            std::string::npos);
  ASSERT_EQ(::mkfifo((dir / "fifo.html").c_str(), 0600), 0);
  EXPECT_NE(
      usage_error_of([&] { write_report_page({dir / "m.jsonl"}, dir / "fifo.html"); }).find("FIFO"),
      std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "fifo.html").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  // A hard link to the metrics file is the metrics file.
  fs::create_hard_link(dir / "m.jsonl", dir / "link.html");
  EXPECT_NE(usage_error_of([&] {
              write_report_page({dir / "m.jsonl"}, dir / "link.html");
            }).find("would destroy it"),
            std::string::npos);
  EXPECT_EQ(slurp(dir / "link.html"), R"({"step":1,"loss":2})"
                                      "\n");
}

// Every writer that renames a temporary over its path refuses a device or FIFO there: as
// root, a rename would replace /dev/null itself.
TEST(ReportInputs, AtomicWritesNeverReplaceASpecialFile) {
  TempDir dir;
  const std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(write_file_atomic(fifo, "x"), UsageError);
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  // A character device node of our own (root only), the same as /dev/null.
  const std::string null = dir / "null";
  if (::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod: not root";
  write_lines(dir / "m.jsonl", {R"({"step":1,"loss":2})"});
  EXPECT_NE(usage_error_of([&] { write_report_page({dir / "m.jsonl"}, null); }).find("a device"),
            std::string::npos);
  ASSERT_EQ(::stat(null.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

}  // namespace
}  // namespace mt
