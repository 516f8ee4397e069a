// `meshtrain report RUN...`: the report page of one or more runs (report/report_page.h).
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "report/report_page.h"

namespace mt {

namespace {

struct ReportArgs {
  std::vector<std::string> runs;
  std::string out;
};

int run_report(const ReportArgs& a) {
  MT_REQUIRE(!a.runs.empty(), "give at least one run: a metrics file or a run directory");
  // One run: beside its metrics; several: a page of their own in the current directory.
  const std::string out = !a.out.empty()       ? a.out
                          : a.runs.size() == 1 ? report_path_for(metrics_file_of(a.runs[0]))
                                               : "report.html";
  write_report_page(a.runs, out, a.out.empty() ? "the report page" : "--out");
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

CommandRunner add_report_command(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report", "write a self-contained HTML page of one or more runs (overlaid)");
  cmd->add_option("runs", a->runs, "metrics files (--metrics of train) or run directories")
      ->required();
  cmd->add_option("--out", a->out,
                  "page to write (default: beside the metrics of one run, else report.html)");
  return [a] { return run_report(*a); };
}

}  // namespace mt
