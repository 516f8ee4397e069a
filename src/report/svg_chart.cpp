#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "report/axis_scale.h"

namespace mt {

namespace {

constexpr double kWidth = 620, kHeight = 300;
constexpr double kLeft = 64, kRight = 16, kTop = 44, kBottom = 42;

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// "x,y" of a data point for the page's script. Ten significant digits, not a double's
// seventeen: a page holds up to 1500 points a series, and ten place a point within a pixel
// unless a chart's whole range is under 1e-7 of its values (then the axis is flat anyway).
std::string value_pair(double x, double y) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g,%.10g", x, y);
  return buf;
}

void open_svg(std::ostringstream& os, const std::string& id, const ChartAxes& a) {
  os << "<svg class=\"chart\" id=\"" << html_escape(id)
     << "\" xmlns=\"http://www.w3.org/2000/svg\" "
     << "viewBox=\"0 0 " << kWidth << " " << kHeight << "\" width=\"" << kWidth << "\" height=\""
     << kHeight << "\" role=\"img\" aria-label=\"" << html_escape(a.title) << "\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
     << "<text x=\"" << kLeft << "\" y=\"18\" class=\"title\">" << html_escape(a.title)
     << "</text>\n";
  if (!a.x_label.empty())
    os << "<text x=\"" << fmt(kLeft + (kWidth - kLeft - kRight) / 2) << "\" y=\"" << kHeight - 6
       << "\" class=\"axis\" text-anchor=\"middle\">" << html_escape(a.x_label) << "</text>\n";
  if (!a.y_label.empty())
    os << "<text transform=\"translate(14," << fmt(kTop + (kHeight - kTop - kBottom) / 2)
       << ") rotate(-90)\" class=\"axis\" text-anchor=\"middle\">" << html_escape(a.y_label)
       << "</text>\n";
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string short_number(double v) {
  char buf[32];
  if (v != 0 && (std::abs(v) >= 1e6 || std::abs(v) < 1e-3))
    std::snprintf(buf, sizeof buf, "%.3g", v);
  else
    std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

namespace {

// A point the chart can place: finite, and positive on a log axis.
bool drawable(double x, double y, bool log_y) {
  return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0);
}

}  // namespace

namespace {

// Where a line chart's plot sits in the viewBox, and its axes over the data.
struct PlotArea {
  double top, w, h;
  AxisScale xs, ys;
  double px(double x) const { return kLeft + xs.fraction(x) * w; }
  double py(double y) const { return top + h - ys.fraction(y) * h; }
};

// Grid, ticks and frame, the ticks grouped (y-ticks, x-ticks) and the frame marked
// plot-area so the page's script can redraw them on other axes (report/chart_fit.h).
void draw_plot_frame(std::ostringstream& os, const PlotArea& p, bool log_y) {
  os << "<g class=\"y-ticks\">\n";
  for (double t : p.ys.ticks(5))
    os << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + p.w << "\" y1=\"" << fmt(p.py(t))
       << "\" y2=\"" << fmt(p.py(t)) << "\" class=\"grid\"/><text x=\"" << kLeft - 4 << "\" y=\""
       << fmt(p.py(t) + 4) << "\" class=\"tick\" text-anchor=\"end\">" << short_number(t)
       << "</text>\n";
  os << "</g><g class=\"x-ticks\">\n";
  for (double t : p.xs.ticks(6))
    os << "<line x1=\"" << fmt(p.px(t)) << "\" x2=\"" << fmt(p.px(t)) << "\" y1=\"" << p.top + p.h
       << "\" y2=\"" << p.top + p.h + 4 << "\" class=\"frame\"/><text x=\"" << fmt(p.px(t))
       << "\" y=\"" << p.top + p.h + 16 << "\" class=\"tick\" text-anchor=\"middle\">"
       << short_number(t) << "</text>\n";
  os << "</g>\n<rect x=\"" << kLeft << "\" y=\"" << p.top << "\" width=\"" << p.w << "\" height=\""
     << p.h << "\" class=\"frame plot-area\" data-log-y=\"" << (log_y ? 1 : 0)
     << "\" fill=\"none\"/>\n";
}

// One series and its legend entry. Each mark carries its values (data-xy) beside its
// position, so the script can place it on axes fitted to the runs shown.
void draw_series(std::ostringstream& os, const ChartSeries& s, const PlotArea& p, bool log_y,
                 std::pair<double, double> legend_at) {
  const std::string run = s.run >= 0 ? " data-run=\"" + std::to_string(s.run) + "\"" : "";
  os << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"1.6\""
     << (s.smooth ? " class=\"smoothable\"" : "") << run
     << (s.dashed ? " stroke-dasharray=\"5,3\"" : "") << " data-xy=\"";
  for (auto [x, y] : s.points)
    if (drawable(x, y, log_y)) os << value_pair(x, y) << " ";
  os << "\" points=\"";
  for (auto [x, y] : s.points)
    if (drawable(x, y, log_y)) os << fmt(p.px(x)) << "," << fmt(p.py(y)) << " ";
  os << "\"><title>" << html_escape(s.label) << "</title></polyline>\n";
  if (s.markers)
    for (auto [x, y] : s.points)
      if (drawable(x, y, log_y))
        os << "<circle data-xy=\"" << value_pair(x, y) << "\" cx=\"" << fmt(p.px(x)) << "\" cy=\""
           << fmt(p.py(y)) << "\" r=\"2.5\" fill=\"" << s.color << "\"" << run << "><title>"
           << html_escape(s.label) << ": " << short_number(x) << ", " << short_number(y)
           << "</title></circle>\n";
  // A run's legend entry toggles the run on every chart (the page's script).
  const auto [legend_x, legend_y] = legend_at;
  os << "<g class=\"legend-entry\""
     << (s.run >= 0 ? " data-run-toggle=\"" + std::to_string(s.run) + "\"" : "") << "><line x1=\""
     << fmt(legend_x) << "\" x2=\"" << fmt(legend_x + 16) << "\" y1=\"" << fmt(legend_y)
     << "\" y2=\"" << fmt(legend_y) << "\" stroke=\"" << s.color << "\" stroke-width=\"2\""
     << (s.dashed ? " stroke-dasharray=\"4,2\"" : "") << "/><text x=\"" << fmt(legend_x + 20)
     << "\" y=\"" << fmt(legend_y + 4) << "\" class=\"legend\">" << html_escape(s.label)
     << "</text></g>\n";
}

}  // namespace

std::string svg_line_chart(const std::string& id, const ChartAxes& a,
                           const std::vector<ChartSeries>& series) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const ChartSeries& s : series)
    for (auto [x, y] : s.points) {
      if (!drawable(x, y, a.log_y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  // Legend entries flow into rows above the plot, which starts below the last row.
  std::vector<std::pair<double, double>> legend_at;  // per series with points
  double lx = kLeft, ly = 32;
  for (const ChartSeries& s : series) {
    if (s.points.empty()) continue;
    const double width = 28 + 6.2 * double(s.label.size());
    if (lx > kLeft && lx + width > kWidth - kRight) lx = kLeft, ly += 14;
    legend_at.push_back({lx, ly});
    lx += width;
  }
  const double top = kTop + (ly - 32);
  std::ostringstream os;
  open_svg(os, id, a);
  if (!(x1 >= x0)) {
    os << "<text x=\"" << kLeft << "\" y=\"" << top + 20
       << "\" class=\"axis\">no data</text>\n</svg>\n";
    return os.str();
  }
  if (x1 == x0) x0 -= 1, x1 += 1;  // one step: a unit either side
  const PlotArea plot{top, kWidth - kLeft - kRight, kHeight - top - kBottom,
                      AxisScale::linear(x0, x1, /*pad=*/false),
                      a.log_y ? AxisScale::logarithmic(y0, y1) : AxisScale::linear(y0, y1, true)};
  draw_plot_frame(os, plot, a.log_y);
  size_t shown = 0;  // series, then the legend above the plot
  for (const ChartSeries& s : series)
    if (!s.points.empty()) draw_series(os, s, plot, a.log_y, legend_at[shown++]);
  os << "</svg>\n";
  return os.str();
}

std::string svg_stacked_bars(const std::string& id, const ChartAxes& a,
                             const std::vector<BarGroup>& groups,
                             const std::vector<std::string>& colors) {
  std::ostringstream os;
  open_svg(os, id, a);
  // Parts that are not finite or not positive take no height (their title still says what
  // they were); sums in long double, so four parts of 1e308 stack without overflowing.
  auto height_of = [](double v) { return std::isfinite(v) && v > 0 ? v : 0.0; };
  long double top = 0;
  for (const BarGroup& g : groups) {
    long double sum = 0;
    for (const auto& p : g.parts) sum += height_of(p.second);
    top = std::max(top, sum);
  }
  if (groups.empty() || top <= 0) {
    os << "<text x=\"" << kLeft << "\" y=\"" << kTop + 20
       << "\" class=\"axis\">no data</text>\n</svg>\n";
    return os.str();
  }
  const double w = kWidth - kLeft - kRight, h = kHeight - kTop - kBottom;
  const AxisScale ys = AxisScale::linear(0, top * 1.05L, /*pad=*/false);
  auto py = [&](long double v) { return kTop + h - ys.fraction(v) * h; };
  for (double t : ys.ticks(5))
    os << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + w << "\" y1=\"" << fmt(py(t))
       << "\" y2=\"" << fmt(py(t)) << "\" class=\"grid\"/><text x=\"" << kLeft - 4 << "\" y=\""
       << fmt(py(t) + 4) << "\" class=\"tick\" text-anchor=\"end\">" << short_number(t)
       << "</text>\n";
  const double slot = w / double(groups.size());
  const double bar = std::min(48.0, slot * 0.7);
  for (size_t i = 0; i < groups.size(); ++i) {
    const double x = kLeft + slot * (double(i) + 0.5) - bar / 2;
    long double base = 0;
    for (size_t k = 0; k < groups[i].parts.size(); ++k) {
      const auto& [name, value] = groups[i].parts[k];
      const double v = height_of(value);
      os << "<rect x=\"" << fmt(x) << "\" y=\"" << fmt(py(base + v)) << "\" width=\"" << fmt(bar)
         << "\" height=\"" << fmt(py(base) - py(base + v)) << "\" fill=\""
         << colors[k % colors.size()] << "\"><title>" << html_escape(groups[i].label) << ": "
         << html_escape(name) << " " << short_number(value) << "</title></rect>\n";
      base += v;
    }
    os << "<text x=\"" << fmt(x + bar / 2) << "\" y=\"" << kTop + h + 14
       << "\" class=\"tick\" text-anchor=\"middle\">" << html_escape(groups[i].label)
       << "</text>\n";
  }
  double legend_x = kLeft;
  for (size_t k = 0; k < groups[0].parts.size(); ++k) {
    os << "<rect x=\"" << fmt(legend_x) << "\" y=\"26\" width=\"12\" height=\"10\" fill=\""
       << colors[k % colors.size()] << "\"/><text x=\"" << fmt(legend_x + 16)
       << "\" y=\"36\" class=\"legend\">" << html_escape(groups[0].parts[k].first) << "</text>\n";
    legend_x += 26 + 6.2 * double(groups[0].parts[k].first.size());
  }
  os << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << w << "\" height=\"" << h
     << "\" class=\"frame\" fill=\"none\"/>\n</svg>\n";
  return os.str();
}

std::string svg_heat_map(const std::string& id, const ChartAxes& a,
                         const std::vector<std::vector<double>>& columns,
                         const std::vector<double>& column_x, const std::string& row_label,
                         size_t group) {
  // "expert 3", or "expert 8-15" for a row that sums a group.
  auto row_name = [&](size_t r) {
    const std::string first = std::to_string(r * group);
    return html_escape(row_label) + " " +
           (group == 1 ? first : first + "-" + std::to_string((r + 1) * group - 1));
  };
  std::ostringstream os;
  open_svg(os, id, a);
  // Shades scale to the largest finite count; a count that is not finite or not positive
  // is white (its title still says what it was).
  auto shaded = [](double v) { return std::isfinite(v) && v > 0; };
  size_t rows = 0;
  double hi = 0;
  for (const auto& c : columns) {
    rows = std::max(rows, c.size());
    for (double v : c)
      if (shaded(v)) hi = std::max(hi, v);
  }
  if (columns.empty() || rows == 0 || hi <= 0) {
    os << "<text x=\"" << kLeft << "\" y=\"" << kTop + 20
       << "\" class=\"axis\">no data</text>\n</svg>\n";
    return os.str();
  }
  const double w = kWidth - kLeft - kRight, h = kHeight - kTop - kBottom;
  const double cw = w / double(columns.size()), ch = h / double(rows);
  for (size_t c = 0; c < columns.size(); ++c)
    for (size_t r = 0; r < columns[c].size(); ++r) {
      // White (no tokens) to dark blue (the busiest expert of the whole run).
      const double f = shaded(columns[c][r]) ? std::clamp(columns[c][r] / hi, 0.0, 1.0) : 0.0;
      const int red = int(255 - f * (255 - 8)), green = int(255 - f * (255 - 48)),
                blue = int(255 - f * (255 - 107));
      os << "<rect x=\"" << fmt(kLeft + cw * double(c)) << "\" y=\"" << fmt(kTop + ch * double(r))
         << "\" width=\"" << fmt(cw + 0.3) << "\" height=\"" << fmt(ch + 0.3) << "\" fill=\"rgb("
         << red << "," << green << "," << blue << ")\"><title>step " << short_number(column_x[c])
         << ", " << row_name(r) << ": " << short_number(columns[c][r]) << "</title></rect>\n";
    }
  const size_t label_every = std::max<size_t>(1, rows / 8);
  for (size_t r = 0; r < rows; r += label_every)
    os << "<text x=\"" << kLeft - 4 << "\" y=\"" << fmt(kTop + ch * (double(r) + 0.5) + 4)
       << "\" class=\"tick\" text-anchor=\"end\">" << row_name(r) << "</text>\n";
  const size_t col_every = std::max<size_t>(1, columns.size() / 6);
  for (size_t c = 0; c < columns.size(); c += col_every)
    os << "<text x=\"" << fmt(kLeft + cw * (double(c) + 0.5)) << "\" y=\"" << kTop + h + 16
       << "\" class=\"tick\" text-anchor=\"middle\">" << short_number(column_x[c]) << "</text>\n";
  os << "<text x=\"" << kWidth - kRight << "\" y=\"36\" class=\"legend\" text-anchor=\"end\">"
     << "darkest = " << short_number(hi) << " tokens</text>\n";
  os << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << w << "\" height=\"" << h
     << "\" class=\"frame\" fill=\"none\"/>\n</svg>\n";
  return os.str();
}

}  // namespace mt
