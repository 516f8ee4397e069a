#include "report/moe_load_maps.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "report/svg_chart.h"

namespace mt {

namespace {

// The layers some step of the run records.
size_t layers_of(const RunMetrics& r) {
  size_t layers = 0;
  for (const auto& s : r.steps)
    if (s.contains("expert_load")) layers = std::max(layers, s["expert_load"].size());
  return layers;
}

struct Columns {
  std::vector<std::vector<double>> load;  // per drawn step, per row
  std::vector<double> steps;
  size_t experts = 0;
};

// Layer `l`'s load per step, thinned to kMaxLoadColumns steps, experts summed in groups of
// `group` (a value that is not finite makes its group's sum so, which draws it white).
Columns columns_of(const RunMetrics& r, size_t l, size_t group) {
  std::vector<const nlohmann::json*> records;
  for (const auto& s : r.steps)
    if (s.contains("expert_load") && s["expert_load"].size() > l) records.push_back(&s);
  Columns c;
  const size_t drawn = std::min(records.size(), kMaxLoadColumns);
  const double stride = drawn ? double(records.size()) / double(drawn) : 1;
  for (size_t k = 0; k < drawn; ++k) {
    const nlohmann::json& s = *records[size_t(double(k) * stride)];
    const nlohmann::json& layer = s["expert_load"][l];
    std::vector<double> col((layer.size() + group - 1) / group, 0.0);
    for (size_t e = 0; e < layer.size(); ++e) col[e / group] += layer[e].get<double>();
    c.experts = std::max(c.experts, layer.size());
    c.load.push_back(std::move(col));
    c.steps.push_back(s["step"].get<double>());
  }
  return c;
}

size_t experts_of(const RunMetrics& r, size_t l) {
  size_t experts = 0;
  for (const auto& s : r.steps)
    if (s.contains("expert_load") && s["expert_load"].size() > l)
      experts = std::max(experts, s["expert_load"][l].size());
  return experts;
}

}  // namespace

std::vector<LoadMap> moe_load_maps(const std::vector<RunMetrics>& runs) {
  std::vector<LoadMap> maps;
  for (size_t i = 0; i < runs.size(); ++i) {
    const size_t layers = layers_of(runs[i]);
    const std::string run = runs.size() > 1 ? runs[i].name + ": " : "";
    for (size_t l = 0; l < std::min(layers, kMaxLoadMapsPerRun); ++l) {
      const size_t experts = experts_of(runs[i], l);
      const size_t group = std::max<size_t>(1, (experts + kMaxLoadRows - 1) / kMaxLoadRows);
      const Columns c = columns_of(runs[i], l, group);
      LoadMap m;
      m.svg = svg_heat_map(str("chart-moe-load-", i, "-", l),
                           {str(run, "MoE layer ", l, " tokens per expert"), "step", ""}, c.load,
                           c.steps, "expert", group);
      m.note = "Tokens routed to each expert per step (darker: more).";
      if (group > 1)
        m.note += str(" The ", experts, " experts are drawn in groups of ", group,
                      " (their sum): the page draws at most ", kMaxLoadRows, " rows.");
      if (l + 1 == kMaxLoadMapsPerRun && layers > kMaxLoadMapsPerRun)
        m.note += str(" ", layers - kMaxLoadMapsPerRun, " more MoE layers of ", runs[i].name,
                      " are not drawn: the page draws at most ", kMaxLoadMapsPerRun, " per run.");
      maps.push_back(std::move(m));
    }
  }
  return maps;
}

}  // namespace mt
