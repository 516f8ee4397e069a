// Pictures of a simulated schedule: an ASCII timeline for the terminal and an SVG for docs.
// Both are time-scaled by the simulator: a box starts and ends where the simulator says.
#pragma once

#include <ostream>
#include <string>

#include "schedule/schedule.h"
#include "schedule/schedule_simulator.h"

namespace mt {

// One row per stage, one cell per time quantum: a compute action shows its label (F3, B3,
// W3; F3.1 for local chunk 1) padded with '-' over the cells it spans; an F&B pair shows its
// two halves, the F half's label ending in '&' (F3&, then B1.1); '.' is idle. The
// quantum is the largest step that all action times are multiples of (at most 12 steps
// per smallest cost; otherwise times are rounded). Ends with a legend line.
void render_ascii(const Schedule& s, const Timeline& t, std::ostream& os);

// A standalone SVG: a title, one row per stage with a box per compute action (colour by
// kind, shade by chunk, microbatch label; an F&B pair as its two halves inside one black
// border), a time axis and a legend.
void render_svg(const Schedule& s, const Timeline& t, const std::string& title, std::ostream& os);

}  // namespace mt
