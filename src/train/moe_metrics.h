// The step's routing metrics of the whole model (docs/contracts.md §6: aux_loss, dropped_frac,
// expert_load) and the per-layer load summary, for any layout. A rank holds the MoE layers
// of its pipeline stage and routes only its dp share of the tokens, so the counts are
// summed over dp, then the stages' layers are gathered over pp into one list in block
// order: every rank ends up with the same whole-model view, and rank 0 writes it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/config.h"
#include "model/moe_layer.h"
#include "parallel/expert_parallel/router_balance.h"

namespace mt {

class MoeMetrics {
 public:
  // local: this rank's MoE layers (GPT::moe_layers()). dp, pp: the rank's groups (null or
  // size 1 when that dimension is 1).
  MoeMetrics(const ModelConfig& cfg, std::vector<MoeLayer*> local, Communicator* dp,
             Communicator* pp);

  // False for a dense model: then every other call does nothing and reduce() no
  // communication.
  bool enabled() const { return !blocks_.empty(); }
  // Start of a step: forget the previous step's routing counts.
  void begin_step();
  // Off during evaluation and sampling, so the counts cover training forwards only.
  void set_recording(bool on);

  // Collective over dp and pp: every rank calls it once per step, after the step's
  // forwards. Then layers() and add_to() describe the step.
  void reduce();
  // aux_loss (mean over groups, summed over layers), dropped_frac (over all layers'
  // assignments) and expert_load (one list per MoE layer, block order) into a record.
  void add_to(nlohmann::json& record) const;
  // One line per MoE block: "step S: moe block I tokens/expert min .. max .., dropped ..%,
  // aux ..", from the last reduce().
  std::vector<std::string> summary(int step) const;

  // Every MoE block of the model in order, and its metrics from the last reduce().
  const std::vector<int>& blocks() const { return blocks_; }
  const std::vector<MoeStepMetrics>& layers() const { return last_; }

 private:
  int E_;
  std::vector<int> blocks_;  // global block index of each MoE layer of the model
  std::vector<MoeLayer*> local_;
  std::vector<int> local_pos_;  // position of local_[i] in blocks_
  Communicator *dp_, *pp_;
  std::vector<MoeStepMetrics> last_;
};

}  // namespace mt
