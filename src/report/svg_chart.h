// Inline SVG charts for the report page: plain markup, no script, so the page is one
// self-contained file that any browser (or none: it is readable as text) can show. The
// markup carries what the page's script works on: each series' run (data-run) and the
// series it may smooth (class "smoothable"); a chart scales to its box (viewBox).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mt {

struct ChartSeries {
  std::string label;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
  bool dashed = false;
  bool markers = false;  // a dot per point (sparse series such as validation loss)
  int run = -1;          // the run it belongs to (data-run; the legend's toggles), -1: none
  bool smooth = false;   // the page's smoothing slider applies to it (training loss)
};

struct ChartAxes {
  std::string title, x_label, y_label;
  bool log_y = false;
};

// A line chart; series without points are left out. `id` becomes the svg's id.
std::string svg_line_chart(const std::string& id, const ChartAxes& axes,
                           const std::vector<ChartSeries>& series);

struct BarGroup {
  std::string label;                                  // under the group (e.g. "run 1, rank 0")
  std::vector<std::pair<std::string, double>> parts;  // stacked, bottom first
};

// Stacked bars, one per group; `colors` by part index; a legend of the first group's parts.
std::string svg_stacked_bars(const std::string& id, const ChartAxes& axes,
                             const std::vector<BarGroup>& groups,
                             const std::vector<std::string>& colors);

// rows x columns of values, colour from white (0) to dark (max); rows are labelled
// row_label + index (row_label + "a-b" when each row sums `group` of them), columns carry
// x values (steps).
std::string svg_heat_map(const std::string& id, const ChartAxes& axes,
                         const std::vector<std::vector<double>>& columns,
                         const std::vector<double>& column_x, const std::string& row_label,
                         size_t group = 1);

// "&<>\"'" escaped for HTML text and attributes.
std::string html_escape(const std::string& s);
// At most 4 significant digits, no exponent for ordinary magnitudes.
std::string short_number(double v);

}  // namespace mt
