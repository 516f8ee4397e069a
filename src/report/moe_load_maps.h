// The MoE expert load of each run on the report page: one heat map per MoE layer, steps
// across, experts down, from the step records' "expert_load". The page stays small whatever
// a metrics file holds: at most kMaxLoadColumns steps (thinned evenly), kMaxLoadRows rows
// (past that, experts are summed in equal groups) and kMaxLoadMapsPerRun layers per run;
// each map's note says what was grouped or left out.
#pragma once

#include <string>
#include <vector>

#include "report/metrics_reader.h"

namespace mt {

inline constexpr size_t kMaxLoadColumns = 300;
inline constexpr size_t kMaxLoadRows = 128;
inline constexpr size_t kMaxLoadMapsPerRun = 16;

struct LoadMap {
  std::string svg;   // the chart (id chart-moe-load-RUN-LAYER)
  std::string note;  // what it shows, and what the bounds changed
};

// `runs` named as the page names them (legends).
std::vector<LoadMap> moe_load_maps(const std::vector<RunMetrics>& runs);

}  // namespace mt
