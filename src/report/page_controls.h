// What makes the report page read like TensorBoard's scalars view: the style (charts in a
// grid that uses the page's width), the controls bar (a smoothing slider for the training
// loss and a legend whose entries show or hide a run on every chart) and the one inline
// script behind them. The page stays one self-contained file: nothing is fetched, and
// without the script the page shows the raw curves of every run and hides the controls.
#pragma once

#include <string>
#include <vector>

namespace mt {

// The page's CSS.
const char* report_page_style();

// The controls bar (hidden until the script shows it): `names` and `colors` of the runs.
std::string report_controls(const std::vector<std::string>& names,
                            const std::vector<std::string>& colors);

// The page's script. Smoothing is TensorBoard's: a debiased exponential moving average,
//   last = last * w + (1 - w) * y_i;  smoothed_i = last / (1 - w^(i+1)),
// applied to the drawn points of each series marked smoothable (the EMA commutes with the
// chart's linear y axis, so smoothing the drawn coordinates is smoothing the values); the
// raw curve stays behind it, faint. The page's address may set the state:
// page.html#smoothing=0.9&hide=0,2 (runs by index). It records what it did on <body>
// (data-charts, data-smoothing, data-hidden, data-layout) for a headless browser test.
// Showing or hiding a run re-fits every line chart's axes to the runs shown
// (report/chart_fit.h), then smooths again from the re-placed raw points.
std::string report_page_script();

}  // namespace mt
