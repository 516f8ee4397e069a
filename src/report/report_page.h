// The report page of one or more runs: a self-contained HTML file (inline SVG and CSS, one
// small inline script that only counts what rendered; nothing fetched) drawn from the
// runs' metrics files (CONTRACTS.md §6, plus the {"event": "run"} record a run writes
// first). `meshtrain report RUN...` writes it; training rewrites it beside --metrics
// (metrics.jsonl -> metrics.html) every --report-every steps and at the end.
//
// Charts (each only when some run has its data): loss and validation loss per token,
// the same per byte of text, validation loss against training time, learning rate,
// gradient norm, tokens/s, MFU, memory by kind per rank, pipeline bubble per step,
// exposed communication per step, MoE expert load over time (a heat map per run and MoE
// layer), the pipeline schedule of each run with pp > 1; then the configuration of every
// run side by side, rows that differ highlighted. Runs are overlaid in one colour each.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mt {

struct RunMetrics {
  std::string name;                    // shown in legends: the metrics path as given
  nlohmann::json run;                  // the {"event": "run"} record (null for older files)
  std::vector<nlohmann::json> steps;   // records with "step"
  std::vector<nlohmann::json> memory;  // {"event": "memory"} records, by rank
};

// `path`: a metrics JSONL file, or a run directory holding metrics.jsonl. Throws
// UsageError when it cannot be read or holds no metrics record. A last line cut short (a
// run writing it right now) is skipped.
RunMetrics read_run_metrics(const std::string& path);

std::string render_report_page(const std::vector<RunMetrics>& runs);

// The metrics file a RUN argument names (the file, or DIR/metrics.jsonl).
std::string metrics_file_of(const std::string& run);
// Beside the metrics file: "x/metrics.jsonl" -> "x/metrics.html".
std::string report_path_for(const std::string& metrics_path);

// Reads the runs and writes the page atomically. Throws UsageError when `out` is one of the
// inputs (it would be destroyed).
void write_report_page(const std::vector<std::string>& runs, const std::string& out);

}  // namespace mt
