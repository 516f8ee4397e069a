// The line charts' axes fitted to the runs shown: hiding a run in the legend rescales every
// line chart to the runs still visible (as TensorBoard does), and showing it again restores
// the full range. The server draws each chart over all runs (svg_chart.h); the marks carry
// their values (data-xy) and the frame its place (rect.plot-area), so the page's script
// recomputes the axes by the same rules in the browser: AxisScale's ranges and 1-2-5 ticks
// (report/axis_scale.h) and short_number's labels (C's %.3g / %.4g), then re-places every
// mark and redraws the ticks. This is that script's part; page_controls.h calls it.
#pragma once

#include <string>

namespace mt {

// JavaScript defining fitCharts(hidden) (hidden: an object whose keys are the hidden runs'
// indexes): every line chart re-fitted to the marks whose run is not hidden (all of them
// when nothing is left to show). Smoothable lines get their new raw points in
// dataset.raw for the smoothing to start from. Meant to sit inside the page's one script.
std::string chart_fit_script();

}  // namespace mt
