#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "report/report_page.h"
#include "report/svg_chart.h"
#include "test_util/temp_dir.h"

namespace mt {
namespace {

using test_util::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A metrics file with everything a page can draw: a pp 2 x dp 2 run with MoE (bubble,
// exposed comm, expert load per layer, per-byte losses, memory of 4 ranks).
void write_rich_run(const std::string& path, double offset) {
  std::ofstream out(path);
  nlohmann::json run = {{"event", "run"},
                        {"model", {{"layers", "2"}, {"dim", "32"}, {"experts", "4"}}},
                        {"layout",
                         {{"dp", 2},
                          {"tp", 1},
                          {"pp", 2},
                          {"ep", 2},
                          {"microbatches", 4},
                          {"schedule", "1f1b"},
                          {"virtual_stages", 1},
                          {"world", 4}}},
                        {"train", {{"steps", 40}, {"lr", 0.003 + offset}}},
                        {"tokenizer", {{"kind", "byte"}}}};
  out << run.dump() << "\n";
  for (int step = 1; step <= 40; ++step) {
    nlohmann::json j = {
        {"step", step},
        {"loss", 5.5 / std::sqrt(step) + offset},
        {"loss_per_byte", 5.5 / std::sqrt(step) / 3.5 + offset},
        {"lr", 0.003 * std::min(1.0, step / 10.0)},
        {"grad_norm", 4.0 / step + 0.1 + offset},
        {"step_time_s", 0.05},
        {"tokens_per_s", 20000 + 100 * step + 10000 * offset},
        {"mfu", 0.3},
        {"bubble", 0.2},
        {"comm_exposed_s", 0.004},
        {"expert_load", {{10 + step, 20, 30 - step % 7, 40}, {25, 25, 25 + step % 3, 25}}}};
    if (step % 10 == 0) {
      j["val_loss"] = 5.7 / std::sqrt(step) + offset;
      j["val_loss_per_byte"] = 5.7 / std::sqrt(step) / 3.5 + offset;
      j["val_bytes_per_token"] = 3.5;
    }
    out << j.dump() << "\n";
    if (step == 1)
      for (int r = 0; r < 4; ++r)
        out << nlohmann::json({{"event", "memory"},
                               {"rank", r},
                               {"params_bytes", 1 << 20},
                               {"grads_bytes", 1 << 20},
                               {"optimizer_bytes", 2 << 20},
                               {"activations_peak_bytes", (3 + r) << 20}})
                   .dump()
            << "\n";
  }
  out << "{\"step\": 41, \"loss\": 1.";  // a line being written right now
}

const char* kCharts[] = {"chart-loss",         "chart-loss-per-byte",
                         "chart-val-time",     "chart-lr",
                         "chart-grad-norm",    "chart-tokens-per-s",
                         "chart-mfu",          "chart-memory",
                         "chart-bubble",       "chart-comm",
                         "chart-moe-load-0-0", "chart-moe-load-0-1",
                         "chart-schedule-0",   "config"};

TEST(ReportPage, HasEveryChartForARunWithTheData) {
  TempDir dir;
  write_rich_run(dir / "a.jsonl", 0);
  write_rich_run(dir / "b.jsonl", 0.2);
  write_report_page({dir / "a.jsonl", dir / "b.jsonl"}, dir / "page.html");
  const std::string page = slurp(dir / "page.html");
  for (const char* id : kCharts)
    EXPECT_NE(page.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  EXPECT_NE(page.find("chart-moe-load-1-1"), std::string::npos);  // the second run's too
  EXPECT_NE(page.find("class=\"differs\""), std::string::npos);   // lr and loss differ
  EXPECT_EQ(page.find("src="), std::string::npos);                // nothing fetched
  // Forty steps of the first run, not the cut-short 41st.
  EXPECT_EQ(read_run_metrics(dir / "a.jsonl").steps.size(), 40u);
}

TEST(ReportPage, BadInputExitsTwo) {
  TempDir dir;
  write_rich_run(dir / "a.jsonl", 0);
  EXPECT_THROW(write_report_page({dir / "a.jsonl"}, dir / "a.jsonl"), UsageError);
  std::ofstream(dir / "empty.jsonl") << "";
  EXPECT_THROW(read_run_metrics(dir / "empty.jsonl"), UsageError);
  EXPECT_THROW(read_run_metrics(dir / "missing.jsonl"), UsageError);
  std::filesystem::create_directories(dir / "run");
  std::filesystem::copy_file(dir / "a.jsonl", dir / "run/metrics.jsonl");
  EXPECT_EQ(read_run_metrics(dir / "run").steps.size(), 40u);  // a run directory
}

TEST(SvgChart, TicksAndEscaping) {
  EXPECT_EQ(html_escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
  EXPECT_EQ(short_number(0.00301), "0.00301");
  EXPECT_EQ(short_number(12345.6), "1.235e+04");
  const std::string svg =
      svg_line_chart("x", {"t", "step", "y", true}, {{"s", "#000", {{1, 0.1}, {2, 1}, {3, 10}}}});
  // Round ticks on a log axis.
  for (const char* t : {">0.1<", ">1<", ">10<"}) EXPECT_NE(svg.find(t), std::string::npos) << t;
}

// --- the page in a real browser -------------------------------------------------------

std::string chromium() {
  for (const char* c : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string cmd = std::string("command -v ") + c + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return c;
  }
  return "";
}

struct BrowserRun {
  int exit_code;
  std::string dom, log;
};

// Loads the page headless; the DOM after scripts ran, and the browser's log (console
// messages included).
BrowserRun open_in_browser(const std::string& browser, const std::string& page,
                           const std::string& screenshot = "", const std::string& hash = "",
                           const std::string& window = "") {
  TempDir io;
  const std::string common = "timeout 120 " + browser +
                             " --headless --no-sandbox --disable-gpu --no-first-run "
                             "--disable-dev-shm-usage --enable-logging=stderr --v=0 "
                             "--user-data-dir=" +
                             (io / "profile") + " ";
  const std::string cmd = common + (window.empty() ? "" : "--window-size=" + window + " ") +
                          "--dump-dom 'file://" + page + hash + "' >" + (io / "dom") + " 2>" +
                          (io / "log");
  const int status = std::system(cmd.c_str());
  if (!screenshot.empty()) {
    const std::string shot =
        common + "--hide-scrollbars --window-size=1360,2600 --screenshot=" + screenshot +
        " 'file://" + page + "' >/dev/null 2>&1";
    EXPECT_EQ(std::system(shot.c_str()), 0) << shot;
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(io / "dom"), slurp(io / "log")};
}

// The page of two runs (the second 3 higher in loss, gradient norm and 30000 in tokens/s),
// for the tests in a real browser; skipped where chromium is not installed.
class ReportPageInBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    browser = chromium();
    if (browser.empty()) GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it)";
    write_rich_run(dir / "a.jsonl", 0);
    write_rich_run(dir / "b.jsonl", 3);
    page = std::filesystem::absolute(dir / "page.html");
    write_report_page({dir / "a.jsonl", dir / "b.jsonl"}, page);
  }
  TempDir dir;
  std::string browser, page;
};

TEST_F(ReportPageInBrowser, RendersEveryChart) {
  // The screenshot is the test's artifact: build/report_page.png, beside the binary.
  const std::string shot =
      (std::filesystem::path(MESHTRAIN_BIN).parent_path() / "report_page.png").string();
  const BrowserRun r = open_in_browser(browser, page, shot);
  ASSERT_EQ(r.exit_code, 0) << r.log;
  EXPECT_EQ(r.log.find("Uncaught"), std::string::npos) << r.log;
  // The page's script counted the charts the browser built: every svg chart rendered.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.dom, m, std::regex("data-charts=\"(\\d+)\"")))
      << r.dom.substr(0, 400);
  EXPECT_GE(std::stoi(m[1].str()), 15);
  for (const char* id : kCharts)
    EXPECT_NE(r.dom.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  EXPECT_GT(std::filesystem::file_size(shot), 20000u);

  // The check can fail: a page whose script breaks is caught.
  std::ofstream(dir / "broken.html") << "<!DOCTYPE html><html><body><script>no_such_function();"
                                        "</script></body></html>";
  const BrowserRun broken =
      open_in_browser(browser, std::filesystem::absolute(dir / "broken.html"));
  EXPECT_NE(broken.log.find("Uncaught"), std::string::npos) << broken.log;
}

// The points of the first polyline of chart `chart` ("": anywhere in `html`) whose
// attributes match `attrs`.
std::vector<std::pair<double, double>> polyline_points(const std::string& html,
                                                       const std::string& chart,
                                                       const std::string& attrs) {
  const size_t at = chart.empty() ? 0 : html.find("id=\"" + chart + "\"");
  if (at == std::string::npos) return {};
  std::smatch m;
  const std::string rest = html.substr(at);
  if (!std::regex_search(rest, m,
                         std::regex("<polyline[^>]*" + attrs + "[^>]*points=\"([^\"]*)\"")))
    return {};
  std::vector<std::pair<double, double>> pts;
  std::istringstream in(m[1].str());
  std::string xy;
  while (in >> xy) pts.push_back({std::stod(xy), std::stod(xy.substr(xy.find(',') + 1))});
  return pts;
}

// TensorBoard's reading: the charts share the page's width in a grid, the training loss is
// smoothed by the debiased EMA of the slider, and a run can be hidden (here through the
// page's address, as a link would; a click goes through the same function).
TEST_F(ReportPageInBrowser, SmoothsTheLossAndHidesARun) {
  const std::string html = slurp(page);
  EXPECT_EQ(html.find("http:", html.find("<script>")), std::string::npos);  // nothing fetched
  const BrowserRun r = open_in_browser(browser, page, "", "#smoothing=0.9&hide=1", "1400,1200");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  EXPECT_EQ(r.log.find("Uncaught"), std::string::npos) << r.log;
  EXPECT_NE(r.dom.find("data-smoothing=\"0.9\""), std::string::npos) << r.dom.substr(0, 600);
  EXPECT_NE(r.dom.find("data-hidden=\"1\""), std::string::npos);
  // The grid: two columns or more at 1400 pixels, the charts filling them.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.dom, m, std::regex("data-layout=\"(\\d+)x(\\d+)/(\\d+)\"")));
  const int columns = std::stoi(m[1].str()), width = std::stoi(m[2].str());
  const int grid = std::stoi(m[3].str());
  EXPECT_GE(columns, 2);
  EXPECT_GE(columns * width, grid * 85 / 100) << m[0].str();
  // The smoothed loss is the debiased EMA of the raw one, which stays drawn behind it (on
  // the axes of the runs shown: HidingARunFitsTheAxesToTheRunsShown).
  const auto raw = polyline_points(r.dom, "chart-loss", "class=\"raw\" data-run=\"0\"");
  const auto drawn = polyline_points(r.dom, "chart-loss", "class=\"smoothable\" data-run=\"0\"");
  ASSERT_EQ(raw.size(), 40u);
  ASSERT_EQ(drawn.size(), raw.size());
  double last = 0, moved = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    last = last * 0.9 + 0.1 * raw[i].second;
    const double want = last / (1 - std::pow(0.9, double(i + 1)));
    EXPECT_NEAR(drawn[i].second, want, 0.06) << "point " << i;
    moved = std::max(moved, std::abs(drawn[i].second - raw[i].second));
  }
  EXPECT_GT(moved, 5.0);  // the smoothing did something visible
  // Run 1 is hidden on every chart, run 0 is not; its toggles say so.
  ASSERT_TRUE(std::regex_search(r.dom, m, std::regex("<polyline[^>]*data-run=\"1\"[^>]*>")));
  EXPECT_NE(m[0].str().find("display: none"), std::string::npos) << m[0].str();
  ASSERT_TRUE(std::regex_search(r.dom, m, std::regex("<polyline[^>]*data-run=\"0\"[^>]*>")));
  EXPECT_EQ(m[0].str().find("display: none"), std::string::npos) << m[0].str();
  EXPECT_NE(r.dom.find("class=\"run-toggle off\" data-run-toggle=\"1\""), std::string::npos);
}

// --- axes fitted to the runs shown ----------------------------------------------------

// The markup of chart `id` (its <svg> element's content).
std::string chart_markup(const std::string& html, const std::string& id) {
  const size_t at = html.find("id=\"" + id + "\"");
  if (at == std::string::npos) return "";
  return html.substr(at, html.find("</svg>", at) - at);
}

// The tick labels of a chart's axis ("y-ticks" or "x-ticks"), in order.
std::vector<std::string> tick_labels(const std::string& chart, const std::string& axis) {
  const size_t at = chart.find("<g class=\"" + axis + "\">");
  if (at == std::string::npos) return {};
  const std::string group = chart.substr(at, chart.find("</g>", at) - at);
  std::vector<std::string> out;
  const std::regex label(">([^<]+)</text>");
  for (auto it = std::sregex_iterator(group.begin(), group.end(), label);
       it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

// The points of the chart's polyline matching `attrs` as fractions of its plot area (0..1
// across and down), so pages whose legends take different heights compare.
std::vector<std::pair<double, double>> plot_fractions(const std::string& chart,
                                                      const std::string& attrs) {
  std::smatch m;
  if (!std::regex_search(chart, m,
                         std::regex("<rect x=\"([-\\d.]+)\" y=\"([-\\d.]+)\" width=\"([-\\d.]+)\" "
                                    "height=\"([-\\d.]+)\" class=\"frame plot-area\"")))
    return {};
  const double left = std::stod(m[1]), top = std::stod(m[2]), w = std::stod(m[3]),
               h = std::stod(m[4]);
  std::vector<std::pair<double, double>> out;
  for (auto [x, y] : polyline_points(chart, "", attrs))
    out.push_back({(x - left) / w, (y - top) / h});
  return out;
}

// Hiding run 1 redraws every line chart as the server draws run 0 alone: the same ticks on
// both axes (linear, logarithmic, labels with exponents, time on x) and run 0's marks at
// the same places in the plot. The second run lies above the first everywhere, so an axis
// left as it was shows other ticks.
TEST_F(ReportPageInBrowser, HidingARunFitsTheAxesToTheRunsShown) {
  write_report_page({dir / "a.jsonl"}, dir / "alone.html");
  const std::string alone = slurp(dir / "alone.html");
  const BrowserRun r = open_in_browser(browser, page, "", "#hide=1&smoothing=0");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  EXPECT_EQ(r.log.find("Uncaught"), std::string::npos) << r.log;
  for (const char* id : {"chart-loss", "chart-grad-norm", "chart-tokens-per-s", "chart-val-time"}) {
    const std::string want = chart_markup(alone, id), got = chart_markup(r.dom, id);
    const std::string both = chart_markup(slurp(page), id);
    for (const char* axis : {"y-ticks", "x-ticks"}) {
      ASSERT_FALSE(tick_labels(want, axis).empty()) << id << " " << axis;
      EXPECT_EQ(tick_labels(got, axis), tick_labels(want, axis)) << id << " " << axis;
    }
    // The page as served drew both runs: the test would see a change that did not happen.
    EXPECT_NE(tick_labels(both, "y-ticks"), tick_labels(want, "y-ticks")) << id;
  }
  for (const char* id : {"chart-loss", "chart-grad-norm"}) {
    const auto want = plot_fractions(chart_markup(alone, id), "data-run=\"0\"");
    const auto got = plot_fractions(chart_markup(r.dom, id), "data-run=\"0\"");
    ASSERT_EQ(got.size(), want.size()) << id;
    ASSERT_FALSE(want.empty()) << id;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i].first, want[i].first, 0.002) << id << " point " << i;
      EXPECT_NEAR(got[i].second, want[i].second, 0.002) << id << " point " << i;
    }
  }
}

// Showing the run again restores the axes of all runs: the page, its second run's toggle
// clicked twice (a script appended after the page's), reads as served.
TEST_F(ReportPageInBrowser, ShowingTheRunAgainRestoresTheFullRange) {
  std::string html = slurp(page);
  html.insert(html.rfind("</body>"),
              "<script>var t = document.querySelector('#controls [data-run-toggle=\"1\"]');"
              "t.click(); document.body.dataset.between = document.body.dataset.hidden;"
              "t.click();</script>");
  std::ofstream(dir / "clicked.html") << html;
  const BrowserRun r =
      open_in_browser(browser, std::filesystem::absolute(dir / "clicked.html"), "", "#smoothing=0");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  EXPECT_EQ(r.log.find("Uncaught"), std::string::npos) << r.log;
  EXPECT_NE(r.dom.find("data-between=\"1\""), std::string::npos);  // it was hidden between
  EXPECT_NE(r.dom.find("data-hidden=\"\""), std::string::npos);
  const std::string served = slurp(page);
  for (const char* id : {"chart-loss", "chart-grad-norm", "chart-tokens-per-s", "chart-val-time"}) {
    const std::string want = chart_markup(served, id), got = chart_markup(r.dom, id);
    for (const char* axis : {"y-ticks", "x-ticks"})
      EXPECT_EQ(tick_labels(got, axis), tick_labels(want, axis)) << id << " " << axis;
    for (const char* run : {"data-run=\"0\"", "data-run=\"1\""}) {
      const auto a = plot_fractions(want, run), b = plot_fractions(got, run);
      ASSERT_EQ(a.size(), b.size()) << id << " " << run;
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_NEAR(b[i].second, a[i].second, 0.002) << id << " " << run << " point " << i;
    }
  }
}

}  // namespace
}  // namespace mt
