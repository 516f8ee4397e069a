// The route phase of a mixture-of-experts layer (moe_layer.h): the router weight, the
// scores and the top-k choices with their gates, the group's aux loss, the capacity plan
// and the routing statistics, and the router's share of the backward (kernels/router.h has
// the arithmetic, kernels/token_permutation.h the plan).
//
// A group (docs/contracts.md §1: one microbatch on one dp index) may be routed by several
// ranks: tensor parallelism's token split (moe_layer.h) and context parallelism's zigzag rows.
// What must be the whole group's (the aux loss and its f, the capacity drops, the statistics:
// each rank records the whole group's, so a sum over dp counts every token once) is summed
// over them by RouteGroup (route_group.h), identical on every rank of the group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/activation_pool.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/param_table.h"
#include "model/route_group.h"
#include "tensor_parallel/tensor_parallel_shard.h"

namespace mt {

// Routing statistics accumulated over the forwards since reset (the trainer resets at the
// start of a step). Counts cover this rank's groups (the whole group under tp's token
// split and cp's zigzag rows): sum them over dp for the step.
struct MoeStats {
  std::vector<int64_t> load;      // (E) kept assignments per expert, after capacity drops
  std::vector<int64_t> selected;  // (E) assignments per expert before drops (bias update)
  int64_t assignments = 0;        // tokens * k routed
  int64_t dropped = 0;            // assignments dropped by capacity
  double aux_sum = 0;             // sum over groups (forwards) of the group's aux loss
  int64_t groups = 0;
  void reset();
};

class MoeRouter {
 public:
  // Registers the router weight [E, C] under `weight_name` and reserves its slot buffers
  // for up to max_rows rows (this rank's tokens of a group). cfg.seq: the rows of one
  // sequence on this rank (T / cp).
  MoeRouter(const std::string& weight_name, const ModelConfig& cfg, const TensorParallelShard& tp,
            const ContextParallelShard& cp, int max_rows, ParamTable& table, SlotLayout& layout);
  void bind(float* params, float* grads) { router_.bind(params, grads); }

  // Scores, choices, gates, the group's aux loss and the capacity plan of this rank's rows
  // h (rows, C) of a group of rows * tp * cp tokens; records statistics when recording.
  // Returns M, the kept assignments. Collective over tp and cp (RouteGroup::sum).
  int route(float* slot, const float* h, int rows);
  // dh (rows, C) += the router's input gradient, from dgates (rows, k) and the aux term;
  // keeps the logits' gradient in the slot for W. The two halves of it, apart: the logits'
  // gradient needs only dgates, not dh (an overlapped layer computes it while its last
  // combine travels, moe_parts.h); backward_input is the two in turn.
  void backward_input(float* slot, const float* dgates, float* dh, int rows);
  void backward_logits(float* slot, const float* dgates, int rows);
  void add_input_grad(float* slot, float* dh, int rows);
  // The router weight's gradient (+=). No communication.
  void backward_weight(float* slot, const float* h, int rows);

  // What the plan left in the slot.
  const int32_t* experts(float* s) const { return ints(s, off_.experts); }      // (rows, k)
  const float* gates(float* s) const { return s + off_.gates; }                 // (rows, k)
  const int32_t* row_of(float* s) const { return ints(s, off_.row_of); }        // (rows, k)
  const int32_t* row_token(float* s) const { return ints(s, off_.row_token); }  // (M)
  int32_t* counts(float* s) const { return ints(s, off_.counts); }  // (E) kept rows per expert

  void set_aux_grad_scale(float s) { aux_grad_scale_ = s; }
  void set_record_stats(bool on) { record_stats_ = on; }
  bool records_stats() const { return record_stats_; }
  const MoeStats& stats() const { return stats_; }
  void reset_stats() { stats_.reset(); }
  std::vector<float>& bias() { return bias_; }
  float bias_step() const { return gamma_; }

 private:
  void record(const RouteSums& g, int64_t tokens, int capacity, double aux);
  bool selects_with_bias() const;
  static int32_t* ints(float* s, size_t off) { return reinterpret_cast<int32_t*>(s + off); }

  int C_, E_, k_;
  RouterScore score_;
  RouterGates gates_how_;
  float capacity_factor_, alpha_, gamma_;
  float aux_grad_scale_ = 1.0f;
  bool record_stats_ = true;
  RouteGroup group_;
  Linear router_;
  std::vector<float> bias_;
  MoeStats stats_;
  // Offsets in a slot. R = max rows, A = R*k assignments. int32 buffers share the float slot.
  struct {
    size_t scores, experts, gates, row_of, row_token, counts, f;  // (R,E) (R,k)x4 (E) (E)
    size_t dlogits;                                               // (R,E): kept for W
  } off_{};
};

}  // namespace mt
