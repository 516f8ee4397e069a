// The whole model's global view on world rank 0, for --export, --save and sampling.
//
// After the data-parallel gather and the tensor-parallel assembly (weights_file.h,
// assemble_global) each rank holds its own tensors at their global shapes, but the model
// is still spread out: pipeline stages hold their chunks' tensors (the last stage a copy
// of wte for the tied head) and the ranks of an expert-parallel group hold E/ep experts
// each. Every tensor of the whole model has an owner, the lowest world rank that holds
// it (tp 0, the lowest dp index, the first stage: wte is taken from the embedding). The
// owners send their tensors to rank 0 point-to-point on the world communicator, in file
// order, so only rank 0 ever holds the whole model.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/config.h"
#include "model/moe_layer.h"
#include "model/param_table.h"
#include "train/weights_file.h"

namespace mt {

// Names and global shapes of every tensor of the whole, unsharded model, in the order of
// GPT::whole_model's table (the order of the files), without allocating any arena.
ParamTable whole_model_table(const ModelConfig& cfg);

// Moves named tensors to rank 0. `whole` lists every tensor (name, element count) in the
// order rank 0 wants them, the same list on every rank; `held` the names this rank holds.
// Construction is collective over `world` (one all-gather of who holds what); it throws
// RuntimeError on every rank when a tensor of `whole` is held by no rank.
class LeadGather {
 public:
  struct Tensor {
    std::string name;
    size_t numel = 0;
  };
  LeadGather(std::vector<Tensor> whole, const std::vector<std::string>& held, Communicator& world);

  // held[j]: the tensor named held[j] at construction. Rank 0 gets every tensor of
  // `whole`, in order; the other ranks an empty list. Collective over world.
  GlobalTensors to_lead(GlobalTensors held) const;

 private:
  std::vector<Tensor> whole_;
  std::vector<int> owner_;       // per whole tensor: world rank that sends it
  std::vector<int> held_index_;  // per whole tensor: index in this rank's held list, or -1
  Communicator& world_;
};

// The trainer's use of it: this rank's table and MoE layers against the whole model.
class GlobalView {
 public:
  // table: this rank's parameter table; moe: its MoE layers, in table order. Collective
  // over world.
  GlobalView(const ModelConfig& cfg, const ParamTable& table, const std::vector<MoeLayer*>& moe,
             Communicator& world);

  // The whole model's table: what rank 0 writes files and builds a sampling model with.
  const ParamTable& whole() const { return whole_; }
  // held: this rank's global tensors in table order (assemble_global). Rank 0 gets the
  // whole model's, in whole() order; the other ranks an empty list. Collective over world.
  GlobalTensors to_lead(GlobalTensors held) const { return tensors_.to_lead(std::move(held)); }
  // The same from a table-layout arena of this rank (its dp-gathered tensors, `table`
  // order): assembled over tp (assemble_global; tp null without tensor parallelism), then
  // sent to rank 0. Collective over tp and world.
  GlobalTensors gather(const ParamTable& table, const float* arena, Communicator* tp) const;
  // Every MoE layer's router bias (router_bias_name), on rank 0, in layer
  // order; empty elsewhere. Collective over world.
  std::vector<NamedTensor> router_biases_to_lead() const;

 private:
  ParamTable whole_;
  std::vector<MoeLayer*> moe_;
  std::vector<std::string> bias_names_;  // the whole model's, in layer order
  LeadGather tensors_, biases_;
};

// The aux-loss-free balancing bias of the MoE layer whose router is `router_weight_name`
// ("transformer.h.{i}.mlp.router.weight" -> "transformer.h.{i}.mlp.router.expert_bias").
// Optimizer-like state: checkpoints keep it beside the moments.
std::string router_bias_name(const std::string& router_weight_name);

// Names of this rank's MoE layers' router biases, in the order of `moe` (table order).
std::vector<std::string> router_bias_names(const ParamTable& table);

}  // namespace mt
