// `meshtrain schedule`: build, validate, simulate and draw one schedule without training.
// Lives here rather than in cli/ so it is testable without the binary; cli/ only parses.
#pragma once

#include <ostream>
#include <string>

#include "schedule/schedule_simulator.h"

namespace mt {

struct ScheduleArgs {
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved | zb-h1 | dualpipev
  int pp = 4;
  int microbatches = 8;
  int virtual_stages = 0;       // 0: 2 for interleaved and dualpipev, 1 otherwise
  std::string costs = "1,1,1";  // F,B,W per action
  double latency = 0;           // per message, in the same units as costs
  double fb_overlap = 0;        // OpCosts::fb_overlap (0: an F&B pair's halves in turn)
  std::string svg;              // write an SVG picture here if not empty
};

// "F,B,W": three finite numbers, F and B > 0, W >= 0. UsageError naming --costs otherwise.
OpCosts parse_costs(const std::string& spec);

// Prints the ASCII timeline, `bubble: X%` and the closed form where one exists; writes the
// SVG if asked. Returns the exit code (0). Throws UsageError on bad arguments, RuntimeError
// if the SVG cannot be written.
int run_schedule_command(const ScheduleArgs& args, std::ostream& os);

}  // namespace mt
