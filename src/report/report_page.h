// The report page of one or more runs: a self-contained HTML file (inline SVG and CSS, one
// inline script for the smoothing slider and the runs' toggles, report/page_controls.h;
// nothing fetched) drawn from the
// runs' metrics files (docs/contracts.md §6, plus the {"event": "run"} record a run writes
// first). `meshtrain report RUN...` writes it; training rewrites it beside --metrics
// (metrics.jsonl -> metrics.html) every --report-every steps and at the end.
//
// Charts (each only when some run has its data): loss and validation loss per token,
// the same per byte of text, validation loss against training time, learning rate,
// gradient norm, tokens/s, MFU, memory by kind per rank, pipeline bubble per step,
// exposed communication per step, MoE expert load over time (a heat map per run and MoE
// layer), the pipeline schedule of each run with pp > 1; then the configuration of every
// run side by side, rows that differ highlighted. Runs are overlaid in one colour each, the
// charts laid out in a grid as wide as the page.
#pragma once

#include <string>
#include <vector>

#include "report/metrics_reader.h"

namespace mt {

// A run without step records (train --steps 0) gets a page that says so, not an error.
std::string render_report_page(const std::vector<RunMetrics>& runs);

// Beside the metrics file: "x/metrics.jsonl" -> "x/metrics.html".
std::string report_path_for(const std::string& metrics_path);

// Reads the runs and writes the page atomically to `out`, which passes the output check of
// every writer first (core/file_checks.h: not a directory, device, FIFO or socket; its
// directory exists), named `out_flag` in errors. Throws UsageError when `out` is one of the
// inputs (it would be destroyed), before anything is read.
void write_report_page(const std::vector<std::string>& runs, const std::string& out,
                       const std::string& out_flag = "--out");

}  // namespace mt
