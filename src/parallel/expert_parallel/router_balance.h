// Step-level helpers of the MoE layers that need the dp group: the aux-loss-free bias update
// (every rank must apply the same update, so the loads are summed over dp first) and the
// step's routing metrics.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "model/moe_layer.h"

namespace mt {

// Sums the layer's `selected` counts of this step over dp and applies
// MoeLayer::update_router_bias. Collective over dp; call after the optimizer step.
void update_router_bias(MoeLayer& layer, Communicator* dp);

// One layer's routing metrics for the step, summed over dp (collective over dp).
struct MoeStepMetrics {
  std::vector<int64_t> expert_load;  // kept (after drops) tokens per expert
  int64_t assignments = 0;           // routed (token, choice) pairs, before drops
  int64_t dropped = 0;               // of which dropped by capacity
  int64_t groups = 0;                // forwards (dp ranks x microbatches)
  double aux_sum = 0;                // sum over the groups of their aux loss
  double dropped_frac = 0;           // dropped / assignments
  double aux_loss = 0;               // mean over the groups
};
MoeStepMetrics reduce_moe_metrics(const MoeLayer& layer, Communicator* dp);
// Sets dropped_frac and aux_loss from the summed counts and aux_sum.
void derive_moe_rates(MoeStepMetrics& m);

}  // namespace mt
