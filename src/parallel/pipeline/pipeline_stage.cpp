#include "parallel/pipeline/pipeline_stage.h"

#include <algorithm>

#include "comm/rank_order_sum.h"
#include "parallel/pipeline/stage_partition.h"
#include "schedule/schedule_simulator.h"

namespace mt {

std::vector<int> resolve_stage_layers(const ModelConfig& cfg, int pp, int virtual_stages,
                                      const std::string& stage_layers) {
  const int chunks = pp * virtual_stages;
  if (!stage_layers.empty()) return parse_stage_layers(stage_layers, cfg.layers, chunks);
  return partition_layers(cfg.layers, chunks, partition_cost_model(cfg.dim, cfg.seq, cfg.vocab));
}

double theoretical_bubble(const Schedule& s) {
  const double closed = closed_form_bubble(s.kind, s.stages, s.microbatches, s.chunks);
  return closed >= 0 ? closed : simulate_schedule(s, OpCosts{}).bubble();
}

double pipeline_bubble(Communicator& group, double busy_seconds, double step_seconds) {
  const std::vector<double> busy = gather_doubles(group, busy_seconds);
  const std::vector<double> step = gather_doubles(group, step_seconds);
  const double window = *std::max_element(step.begin(), step.end());
  if (window <= 0) return 0;
  double mean = 0;
  for (double b : busy) mean += (1 - b / window) / double(busy.size());
  return mean;
}

}  // namespace mt
