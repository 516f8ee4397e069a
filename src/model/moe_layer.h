// Mixture-of-experts MLP (docs/contracts.md §1, MoE variant), the drop-in for a Block's dense
// MLP: y (N, C) = sum over the token's kept choices of gate * expert_e(h), where h (N, C)
// is ln_2's output and the caller adds y to the residual. Each expert is the dense MLP
// (c_fc, tanh GELU, c_proj) with its own weights.
//
// One forward, for N tokens of this rank's microbatch (one aux/capacity group), in phases:
//   route:    logits = h @ router.weight^T, softmax, top-k, gates, aux loss
//             (kernels/router.h); capacity drops and the stable sort by expert
//             (kernels/token_permutation.h)
//   dispatch: the rows to the ep ranks owning their experts, expert-major there
//             (TokenExchange; at ep = 1 the IdentityExchange, where nothing moves)
//   experts:  the local experts over their contiguous rows (ExpertMlp, expert_mlp.h)
//   combine:  results back to their rank, then the gate-weighted sum per token
// Backward mirrors it: the gate gradients (dy . expert output) feed the router with the aux
// term; gate * dy goes to the experts by a dispatch, their input gradients come back by a
// combine. backward_input (B) leaves in the slot what backward_weight (W) needs, so W does
// no communication. Every pass runs the same calls at every ep and precision: the exchange
// and the experts were chosen at construction.
//
// Expert parallelism: ep rank r holds experts r*E/ep .. (r+1)*E/ep - 1 and registers only
// those (global names). Gradient reduction rule for the data-parallel reducer: expert
// tensors (is_expert_param) are summed over ParallelContext::ep_replica, every other
// tensor of the layer over ParallelContext::dp; both then take the dense tensors' factor.
//
// --precision bf16 (ExpertParallelShard::bf16_version non-null; docs/precision.md): the
// experts are Bf16GeluExperts (expert_mlp_bf16.h). The router (GEMM, softmax, top-k, aux
// loss), the experts' outputs y_perm (the gates' gradient reads them), all gradients and the
// ep exchanges stay fp32. The router stays fp32 because a routing decision is a comparison:
// a bf16-rounded logit flips near-ties between experts, and a flipped choice changes a
// token's whole output.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "model/activation_pool.h"
#include "model/config.h"
#include "model/expert_mlp.h"
#include "model/expert_mlp_bf16.h"
#include "model/linear.h"
#include "model/param_table.h"
#include "model/token_exchange.h"

namespace mt {

struct ExpertParallelShard {
  int rank = 0, size = 1;
  // Over the ep group; null when size == 1, for the layer's own IdentityExchange.
  TokenExchange* exchange = nullptr;
  // --precision bf16: the model's weight version (GPT::weights_changed); null for fp32.
  // Carried here because the Block passes this struct to the layer unchanged.
  const uint64_t* bf16_version = nullptr;
  // A dry run (model/dry_model.h): the layer's arenas take sizes without memory. Carried
  // here for the same reason.
  bool dry = false;
};

// Routing statistics accumulated over the forwards since reset (the trainer resets at the
// start of a step). Counts are this rank's tokens only: sum them over dp for the step.
struct MoeStats {
  std::vector<int64_t> load;      // (E) kept assignments per expert, after capacity drops
  std::vector<int64_t> selected;  // (E) assignments per expert before drops (bias update)
  int64_t assignments = 0;        // tokens * k routed
  int64_t dropped = 0;            // assignments dropped by capacity
  double aux_sum = 0;             // sum over groups (forwards) of the group's aux loss
  int64_t groups = 0;
  void reset();
};

// True for the tensors of transformer.h.{i}.mlp.experts.{e}.* (reduce over ep_replica).
bool is_expert_param(const std::string& name);

class MoeLayer {
 public:
  // Registers the router and this rank's experts in `table` and reserves the per-microbatch
  // buffers in `layout` for up to max_tokens tokens (b*T) per forward.
  MoeLayer(int layer, const ModelConfig& cfg, const ExpertParallelShard& ep, int max_tokens,
           ParamTable& table, SlotLayout& layout);
  // Not copied or moved: at ep = 1 the layer's exchange is one of its own members.
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  void bind(float* params, float* grads);

  // y (N, C) = moe(h (N, C)); y is overwritten. h must stay untouched until backward_weight.
  // Every rank of the ep group must call it for the same microbatches in the same order.
  void forward(float* slot, const float* h, float* y, int N);
  // dh (N, C) = gradient w.r.t. h from dy (N, C), experts and router paths, plus the aux
  // loss gradient (scaled by aux_grad_scale). Overwrites dh. Collective over ep.
  void backward_input(float* slot, const float* h, const float* dy, float* dh, int N);
  // Router and local expert weight gradients (+=). No communication.
  void backward_weight(float* slot, const float* h, int N);

  // The factor that turns one group's aux-loss gradient into the step's: the trainer sums
  // gradients over microbatches and dp ranks, and aux_loss is the mean over the G = dp *
  // microbatches groups, so pass 1/G (equivalently N_group / (global B*T), the CE scale
  // times the group's token count). Default 1 (a single group).
  void set_aux_grad_scale(float s) { aux_grad_scale_ = s; }
  // Off during evaluation so routing statistics cover training forwards only.
  void set_record_stats(bool on) { record_stats_ = on; }
  const MoeStats& stats() const { return stats_; }
  void reset_stats() { stats_.reset(); }

  // Aux-loss-free balancing state (E): added to the probs for selection only. Not a
  // parameter (no gradient, no optimizer): checkpoint it next to the optimizer state, e.g.
  // as "transformer.h.{i}.mlp.router.expert_bias" [E]. Must be identical on every rank.
  std::vector<float>& router_bias() { return bias_; }
  // After the optimizer step: bias_e += gamma * sign(mean(load) - load_e), where load is
  // the step's `selected` counts summed over the dp group (so every rank applies the same
  // update). No-op when --router-bias-update is 0.
  void update_router_bias(const int64_t* load);

  // --precision bf16: the fp32 stage the experts round their GELU outputs and gradients
  // through, bf16_stage_floats() floats, shared with the other layers of the chunk (every
  // use ends inside one call). Must be set before the first forward.
  size_t bf16_stage_floats() const { return experts_->stage_floats(); }
  void set_bf16_stage(float* stage) { experts_->set_stage(stage); }
  // Bytes of the local experts' bf16 weight copies (0 in fp32).
  size_t bf16_weight_bytes() const { return experts_->weight_copy_bytes(); }
  // Floats of the arenas the layer holds itself (its per-call rows and the experts'),
  // outside the slot and the chunk's shared workspaces.
  size_t own_workspace_floats() const {
    return rows_.size() + staging_.size() + dgates_.size() + experts_->own_workspace_floats();
  }
  // The bf16 experts' row chunks (expert_mlp_bf16.h), which the planner and the memory
  // estimate model.
  static constexpr int kRowQuantum = Bf16GeluExperts::kRowQuantum;
  static int bf16_chunk_rows(int max_tokens) { return Bf16GeluExperts::chunk_rows(max_tokens); }

  // Global block index of this layer (transformer.h.{layer}).
  int layer() const { return layer_; }
  int experts() const { return E_; }
  int local_experts() const { return El_; }

 private:
  // The route phase: router, top-k, aux loss, capacity plan and statistics; returns M, the
  // kept assignments (the rows this rank sends).
  int route(float* slot, const float* h, int N);
  void record_stats(const int32_t* experts, const int32_t* counts, int N, int M, double aux);
  ExchangeCounts exchange_counts(float* slot) const;
  // Rows of each local expert in expert-major order, from recv_counts (rank, local expert).
  ExpertGroups expert_groups(const int32_t* recv_counts);

  int layer_, C_, E_, k_, El_, max_tokens_;
  float capacity_factor_, alpha_, gamma_;
  float aux_grad_scale_ = 1.0f;
  bool record_stats_ = true;
  IdentityExchange identity_;          // the exchange at ep = 1
  TokenExchange* exchange_ = nullptr;  // identity_ or ExpertParallelShard::exchange
  Linear router_;
  std::unique_ptr<ExpertMlp> experts_;
  std::vector<float> bias_;
  MoeStats stats_;
  // Per-call scratch (not per microbatch), sized once: the working rows (the experts' input
  // where their slot keeps another form, their outputs, the gradient rows), the exchange's
  // staging rows, gate gradients, per-expert row offsets.
  Arena rows_, staging_, dgates_;
  std::vector<int32_t> expert_offset_;
  // Offsets in a slot. N = max tokens, M = N*k local assignments. int32 buffers share the
  // float slot (same size). The experts reserve their own rows (R of them: ep * N *
  // min(k, E/ep), what one rank can receive).
  struct {
    size_t probs, experts, gates, row_of, row_token, counts, recv_counts, f;  // (N,E) (N,k)..
    size_t y_perm;   // (M,C): the experts' outputs, expert-sorted, for the gates' gradient
    size_t dlogits;  // (N,E): kept for W
  } off_{};
};

}  // namespace mt
