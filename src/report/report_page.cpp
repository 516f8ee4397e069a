#include "report/report_page.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "report/moe_load_maps.h"
#include "report/page_controls.h"
#include "report/schedule_picture.h"
#include "report/svg_chart.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

// Colour-blind-safe (Okabe-Ito), one per run.
const std::vector<std::string> kRunColors = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                             "#E69F00", "#56B4E9", "#000000", "#F0E442"};
const std::vector<std::string> kMemoryColors = {"#0072B2", "#E69F00", "#009E73", "#CC79A7"};
// A long run keeps its page small: at most this many points per series.
constexpr size_t kMaxPoints = 1500;

const std::string& color_of(size_t run) {
  return kRunColors[run % kRunColors.size()];
}

bool has(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number();
}

// v * scale for a chart in other units (%, ms): a finite value stays finite (1e308 * 100
// lands at the largest double, the chart's edge, rather than vanishing as Inf).
double scaled(double v, double scale) {
  if (!std::isfinite(v)) return v;
  const long double max = std::numeric_limits<double>::max();
  return double(std::clamp(static_cast<long double>(v) * scale, -max, max));
}

// (step, record[key]) for the records that have it, thinned evenly to kMaxPoints.
std::vector<std::pair<double, double>> series_of(const RunMetrics& r, const char* key,
                                                 double scale = 1, const char* x_key = "step") {
  std::vector<std::pair<double, double>> pts;
  double elapsed = 0;
  for (const auto& s : r.steps) {
    // A step time that is not finite is left out of the clock, not allowed to stop it.
    if (has(s, "step_time_s") && std::isfinite(s["step_time_s"].get<double>()))
      elapsed += s["step_time_s"].get<double>();
    if (!has(s, key)) continue;
    const double x = std::string(x_key) == "time" ? elapsed : s["step"].get<double>();
    pts.push_back({x, scaled(s[key].get<double>(), scale)});
  }
  if (pts.size() > kMaxPoints) {
    std::vector<std::pair<double, double>> thin;
    const double stride = double(pts.size()) / kMaxPoints;
    for (size_t i = 0; i < kMaxPoints; ++i) thin.push_back(pts[size_t(double(i) * stride)]);
    thin.push_back(pts.back());
    pts = std::move(thin);
  }
  return pts;
}

bool any_run_has(const std::vector<RunMetrics>& runs, const char* key) {
  for (const auto& r : runs)
    for (const auto& s : r.steps)
      if (s.contains(key)) return true;
  return false;
}

struct Section {
  std::string title, note, body;
};

// One chart of `key` (and optionally a sparse companion such as val_loss) for every run.
std::string metric_chart(const std::vector<RunMetrics>& runs, const std::string& id,
                         const ChartAxes& axes, const char* key, const char* companion = nullptr,
                         double scale = 1, const char* x_key = "step") {
  std::vector<ChartSeries> series;
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string name = runs.size() > 1 ? runs[i].name + " " : "";
    // Validation metrics exist on eval steps only: dots, so a lone point still shows.
    const bool sparse = std::string(key).rfind("val_", 0) == 0;
    // The training loss is what the smoothing slider smooths (report/page_controls.h).
    const bool smooth = std::string(key) == "loss" || std::string(key) == "loss_per_byte";
    series.push_back({name + key, color_of(i), series_of(runs[i], key, scale, x_key), false, sparse,
                      int(i), smooth});
    if (companion)
      series.push_back({name + companion, color_of(i), series_of(runs[i], companion, scale, x_key),
                        true, true, int(i)});
  }
  return svg_line_chart(id, axes, series);
}

std::string memory_chart(const std::vector<RunMetrics>& runs) {
  std::vector<BarGroup> groups;
  const double mib = 1024.0 * 1024.0;
  for (size_t i = 0; i < runs.size(); ++i)
    for (const auto& m : runs[i].memory) {
      BarGroup g;
      g.label = (runs.size() > 1 ? "run " + std::to_string(i + 1) + " " : "") + "rank " +
                std::to_string(m.value("rank", 0));
      for (const char* k :
           {"params_bytes", "grads_bytes", "optimizer_bytes", "activations_peak_bytes"}) {
        std::string name = k;
        name = name.substr(0, name.find("_bytes"));
        g.parts.push_back({name, m.value(k, 0.0) / mib});
      }
      groups.push_back(std::move(g));
    }
  return svg_stacked_bars("chart-memory", {"Memory by kind per rank (after step 1)", "", "MiB"},
                          groups, kMemoryColors);
}

// "a.b" -> printable value, for the configuration table.
void flatten(const nlohmann::json& j, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (k == "event") continue;
      flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    }
  } else if (j.is_string()) {
    out[prefix] = j.get<std::string>();
  } else if (j.is_number_float()) {
    out[prefix] = short_number(j.get<double>());
  } else {
    out[prefix] = j.dump();
  }
}

std::map<std::string, std::string> summary_of(const RunMetrics& r) {
  std::map<std::string, std::string> m;
  flatten(r.run, "", m);
  m["result.steps recorded"] = std::to_string(r.steps.size());
  auto last = [&](const char* key) -> std::optional<double> {
    for (auto it = r.steps.rbegin(); it != r.steps.rend(); ++it)
      if (has(*it, key)) return (*it)[key].get<double>();
    return std::nullopt;
  };
  for (const char* k : {"loss", "val_loss", "loss_per_byte", "val_loss_per_byte"})
    if (auto v = last(k)) m[std::string("result.last ") + k] = short_number(*v);
  double tps = 0, secs = 0;
  int n = 0;
  auto finite = [](const nlohmann::json& s, const char* key) {
    return has(s, key) && std::isfinite(s[key].get<double>());
  };
  for (const auto& s : r.steps) {
    if (finite(s, "step_time_s")) secs += s["step_time_s"].get<double>();
    if (finite(s, "tokens_per_s") && s["step"].get<double>() > 1)
      tps += s["tokens_per_s"].get<double>(), ++n;
  }
  if (n) m["result.mean tokens/s (after step 1)"] = short_number(tps / n);
  m["result.training time (s)"] = short_number(secs);
  return m;
}

std::string config_table(const std::vector<RunMetrics>& runs) {
  std::vector<std::map<std::string, std::string>> rows;
  std::set<std::string> keys;
  for (const auto& r : runs) {
    rows.push_back(summary_of(r));
    for (const auto& [k, v] : rows.back()) keys.insert(k);
  }
  std::ostringstream os;
  os << "<table id=\"config\"><thead><tr><th>setting</th>";
  for (size_t i = 0; i < runs.size(); ++i)
    os << "<th><span class=\"swatch\" style=\"background:" << color_of(i) << "\"></span>"
       << html_escape(runs[i].name) << "</th>";
  os << "</tr></thead><tbody>\n";
  for (const std::string& k : keys) {
    std::set<std::string> values;
    for (const auto& row : rows) values.insert(row.count(k) ? row.at(k) : "");
    const bool differs = runs.size() > 1 && values.size() > 1 && k.rfind("result.", 0) != 0;
    os << "<tr" << (differs ? " class=\"differs\"" : "") << "><td>" << html_escape(k) << "</td>";
    for (const auto& row : rows)
      os << "<td>" << html_escape(row.count(k) ? row.at(k) : "") << "</td>";
    os << "</tr>\n";
  }
  os << "</tbody></table>\n";
  return os.str();
}

}  // namespace

std::string report_path_for(const std::string& metrics_path) {
  fs::path p(metrics_path);
  p.replace_extension(".html");
  return p.string();
}

namespace {

// Legends stay short: the fewest trailing path components that tell the runs apart
// ("a.jsonl", or "fortunes/metrics.jsonl" when every run's file is metrics.jsonl).
std::vector<RunMetrics> with_short_names(std::vector<RunMetrics> runs) {
  for (int depth = 1; depth <= 8; ++depth) {
    std::vector<std::string> names;
    for (const RunMetrics& r : runs) {
      fs::path p = fs::path(metrics_file_of(r.name)).lexically_normal(), tail;
      std::vector<fs::path> parts(p.begin(), p.end());
      for (size_t k = parts.size() > size_t(depth) ? parts.size() - size_t(depth) : 0;
           k < parts.size(); ++k)
        tail /= parts[k];
      names.push_back(tail.string());
    }
    if (std::set<std::string>(names.begin(), names.end()).size() == names.size() || depth == 8) {
      for (size_t i = 0; i < runs.size(); ++i) runs[i].name = names[i];
      return runs;
    }
  }
  return runs;
}

}  // namespace

namespace {

// The charts of the step records; none when no run has one.
void add_step_charts(const std::vector<RunMetrics>& runs, std::vector<Section>& sections) {
  auto add = [&](const std::string& title, const std::string& note, const std::string& body) {
    sections.push_back({title, note, body});
  };
  add("Loss per token",
      "Training loss every step (solid), validation loss on eval steps (dashed, dots).",
      metric_chart(runs, "chart-loss", {"Loss per token", "step", "nats / token"}, "loss",
                   "val_loss"));
  if (any_run_has(runs, "loss_per_byte"))
    add("Loss per byte",
        "Loss divided by the bytes of text per token of each split: comparable across tokenizers.",
        metric_chart(runs, "chart-loss-per-byte", {"Loss per byte", "step", "nats / byte"},
                     "loss_per_byte", "val_loss_per_byte"));
  const bool per_byte = any_run_has(runs, "val_loss_per_byte");
  if (any_run_has(runs, "val_loss"))
    add("Validation loss against training time",
        "Cumulative step time on the x axis: which run is better after the same time.",
        metric_chart(runs, "chart-val-time",
                     {per_byte ? "Validation loss per byte vs time" : "Validation loss vs time",
                      "training time (s)", per_byte ? "nats / byte" : "nats / token"},
                     per_byte ? "val_loss_per_byte" : "val_loss", nullptr, 1, "time"));
  add("Learning rate", "", metric_chart(runs, "chart-lr", {"Learning rate", "step", "lr"}, "lr"));
  add("Gradient norm", "Global L2 norm before clipping (log scale).",
      metric_chart(runs, "chart-grad-norm", {"Gradient norm", "step", "L2 norm", true},
                   "grad_norm"));
  add("Throughput", "",
      metric_chart(runs, "chart-tokens-per-s", {"Tokens per second", "step", "tokens/s"},
                   "tokens_per_s"));
  add("MFU", "Model FLOPs per second over the sgemm peak of the run's threads.",
      metric_chart(runs, "chart-mfu", {"MFU", "step", "%"}, "mfu", nullptr, 100));
}

std::vector<Section> page_sections(const std::vector<RunMetrics>& runs) {
  std::vector<Section> sections;
  auto add = [&](const std::string& title, const std::string& note, const std::string& body) {
    sections.push_back({title, note, body});
  };
  if (std::any_of(runs.begin(), runs.end(), [](const RunMetrics& r) { return !r.steps.empty(); }))
    add_step_charts(runs, sections);
  if (std::any_of(runs.begin(), runs.end(), [](const RunMetrics& r) { return !r.memory.empty(); }))
    add("Memory", "Parameters, gradients, optimizer state and peak activations of each rank.",
        memory_chart(runs));
  if (any_run_has(runs, "bubble"))
    add("Pipeline bubble", "Measured idle share of the step, averaged over ranks.",
        metric_chart(runs, "chart-bubble", {"Pipeline bubble", "step", "% of step"}, "bubble",
                     nullptr, 100));
  if (any_run_has(runs, "comm_exposed_s"))
    add("Exposed communication", "Time rank 0 waited on communication that compute did not hide.",
        metric_chart(runs, "chart-comm", {"Exposed communication", "step", "ms"}, "comm_exposed_s",
                     nullptr, 1000));
  for (const LoadMap& m : moe_load_maps(runs)) add("MoE expert load", m.note, m.svg);
  for (size_t i = 0; i < runs.size(); ++i) {
    const SchedulePicture pic = schedule_picture(runs[i].run, runs[i].name, i);
    if (!pic.body.empty())
      add("Pipeline schedule" + (runs.size() > 1 ? ": " + runs[i].name : ""), pic.note, pic.body);
  }
  return sections;
}

// Runs that recorded no step (train --steps 0, or resuming a run that had finished).
std::string no_steps_note(const std::vector<RunMetrics>& runs) {
  std::string names;
  for (const RunMetrics& r : runs)
    if (r.steps.empty()) names += (names.empty() ? "" : ", ") + r.name;
  if (names.empty()) return "";
  return "<p class=\"note\" id=\"no-steps\">No step records in " + html_escape(names) +
         ": the run took no training step (--steps 0, or it resumed from a checkpoint at its "
         "last step), so there is no curve to draw.</p>\n";
}

}  // namespace

std::string render_report_page(const std::vector<RunMetrics>& runs_in) {
  const std::vector<RunMetrics> runs = with_short_names(runs_in);
  const std::vector<Section> sections = page_sections(runs);
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
     << "<title>meshtrain report</title>\n<style>" << report_page_style()
     << "</style></head>\n<body>\n"
     << "<h1>meshtrain report</h1>\n<p class=\"sub\">";
  for (size_t i = 0; i < runs.size(); ++i)
    os << (i ? " &middot; " : "") << "<span class=\"swatch\" style=\"background:" << color_of(i)
       << "\"></span>" << html_escape(runs[i].name) << " (" << runs[i].steps.size() << " steps)";
  std::vector<std::string> names;
  for (const RunMetrics& r : runs) names.push_back(r.name);
  os << "</p>\n"
     << report_controls(names, kRunColors) << no_steps_note(runs)
     << "<div class=\"grid-charts\">\n";
  for (const Section& s : sections) {
    os << "<section><h2>" << html_escape(s.title) << "</h2>\n" << s.body;
    if (!s.note.empty()) os << "<p class=\"note\">" << html_escape(s.note) << "</p>";
    os << "</section>\n";
  }
  os << "</div>\n<h2>Configuration</h2>\n"
     << config_table(runs)
     // The only script: smoothing, the runs' toggles (each line chart fitted to the runs
     // shown), and a record of what rendered for a headless browser test. The page needs
     // no script to be read.
     << report_page_script() << "</body></html>\n";
  return os.str();
}

void write_report_page(const std::vector<std::string>& runs, const std::string& out,
                       const std::string& out_flag) {
  MT_REQUIRE(!runs.empty(), "give at least one run: a metrics file or a run directory");
  // Before anything is read: the page must not replace one of its inputs (by any name: a
  // link or a hard link too), and `out` must be a place a page can be renamed onto.
  std::error_code ec;
  const fs::path out_abs = fs::weakly_canonical(fs::absolute(out), ec);
  const std::optional<FileId> out_id = file_id(out);
  for (const std::string& r : runs) {
    const std::string in = metrics_file_of(r);
    MT_REQUIRE(
        fs::weakly_canonical(fs::absolute(in), ec) != out_abs && (!out_id || out_id != file_id(in)),
        out_flag, " ", out, " is the metrics file of run ", r,
        "; writing the page would destroy it");
  }
  require_output_file(out_flag, out, OutputUse::replaced);
  std::vector<RunMetrics> loaded;
  for (const std::string& r : runs) loaded.push_back(read_run_metrics(r));
  write_file_atomic(out, render_report_page(loaded));
}

}  // namespace mt
