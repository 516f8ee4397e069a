// Mixture-of-experts MLP, the drop-in for a Block's dense MLP: y (N, C) = sum over the
// token's kept choices of gate * expert_e(h), where h (N, C) is the block's normed input
// and the caller adds y to the residual. gpt2 (docs/contracts.md §1, MoE variant): softmax
// router, GELU experts of the dense width. llama (§9, DeepSeek-V3): softmax or sigmoid
// router with --routed-scale, SwiGLU experts of --expert-ffn-dim (the shared experts are the
// llama block's, llama_block.h).
//
// One forward, for this rank's tokens of one aux/capacity group, in phases:
//   route:    the router, top-k, gates, aux loss and the capacity plan (moe_router.h)
//   dispatch: the rows to the ep ranks owning their experts, expert-major there
//             (TokenExchange; at ep = 1 the IdentityExchange, where nothing moves)
//   experts:  the local experts over their contiguous rows (ExpertMlp, expert_mlp.h)
//   combine:  results back to their rank, then the gate-weighted sum per token
// Backward mirrors it: the gate gradients (dy . expert output) feed the router with the aux
// term; gate * dy goes to the experts by a dispatch, their input gradients come back by a
// combine. backward_input (B) leaves in the slot what backward_weight (W) needs, so W does
// no communication. Every pass runs the same calls at every ep > 1, tp and precision: the
// exchange and the experts were chosen at construction. Where nothing travels (ep = 1,
// TokenExchange::moves_rows false) the layer skips the fp32 row blocks an exchange would
// carry: the experts pack their input and output-gradient rows straight from the tokens in
// their own form (bf16: rounded once) and write their outputs where the combine reads them.
// The bits are the same either way (tests/model/test_moe_exchange.cpp). The bf16 experts
// sum each token's rows in row order (ExpertMlp::sums_in_row_order), and where nothing
// travels the SwiGLU ones on the AMX path do those sums in their last GEMMs' stores
// (sums_into_tokens: no combine or scatter-add pass over the M rows; the same bits,
// tests/model/test_moe_token_sums.cpp).
//
// Expert parallelism: ep rank r holds experts r*E/ep .. (r+1)*E/ep - 1 and registers only
// those (global names). Gradient reduction rule for the data-parallel reducer: expert
// tensors (is_expert_param) are summed over ParallelContext::ep_replica, every other
// tensor of the layer over ParallelContext::dp; both then take the dense tensors' factor.
//
// Tensor parallelism (docs/moe.md, "Tensor parallelism"): the experts are replicated over
// tp and the tokens split, not the experts' weights (Megatron's expert tensor parallelism
// is not built). tp rank r routes and computes rows [r*N/t, (r+1)*N/t) of the N token rows:
// under sequence parallelism those are exactly the rows it holds, so the layer adds no tp
// communication but the router's group sums (moe_router.h); without it every rank holds all
// N rows, takes its run, and all-gathers the outputs (forward) and the input gradients (B).
// The router's and the experts' weight gradients then cover each rank's tokens only
// (ParamInfo::tp_partial_grad: the trainer sums them over tp once per step).
//
// --precision bf16 (ExpertParallelShard::bf16_version non-null; docs/precision.md): the
// experts are their bf16 kind (expert_mlp_bf16.h). The router (GEMM, scores, top-k, aux
// loss), the experts' outputs y_perm (the gates' gradient reads them), all gradients and the
// ep exchanges stay fp32. The router stays fp32 because a routing decision is a comparison:
// a bf16-rounded logit flips near-ties between experts, and a flipped choice changes a
// token's whole output.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "model/activation_pool.h"
#include "model/config.h"
#include "model/context_parallel_shard.h"
#include "model/expert_mlp.h"
#include "model/expert_mlp_bf16.h"
#include "model/moe_parts.h"
#include "model/moe_router.h"
#include "model/param_table.h"
#include "model/token_exchange.h"
#include "tensor_parallel/tensor_parallel_shard.h"

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
  // --moe-overlap-parts: the microbatch's tokens cut into this many parts whose exchanges
  // overlap the experts of another (moe_parts.h); 1 = one blocking exchange each way.
  int overlap_parts = 1;
  // With overlap_parts > 1: the routed experts' weight gradients are accumulated in B,
  // while the last backward combine travels, instead of in W. Sound only where a unit's
  // gradients stay bound for the whole step (ZeRO 0-1; at 2-3 the dp reducer binds a
  // pooled bucket only before W), and worth it only where W follows B at once (not zb-h1
  // or DualPipe-V, whose W fills bubbles): the trainer decides (train/session.cpp).
  bool expert_grads_in_b = false;
  // --cp > 1: this rank holds the zigzag rows of each sequence; the router sums its group's
  // statistics over the cp group too (route_group.h). Carried here for the same reason.
  ContextParallelShard cp = {};
};

// True for the tensors of the routed experts, {transformer.h|model.layers}.{i}.mlp.experts.*
// (reduced over ep_replica); the shared experts are not among them.
bool is_expert_param(const std::string& name);

// The router's weight name of block `layer` (gpt2: transformer.h.{i}.mlp.router.weight;
// llama: model.layers.{i}.mlp.gate.weight).
std::string router_weight_name(const ModelConfig& cfg, int layer);

class MoeLayer {
 public:
  // Registers the router and this rank's experts in `table` and reserves the per-microbatch
  // buffers in `layout` for microbatches of up to max_tokens tokens (b*T).
  MoeLayer(int layer, const ModelConfig& cfg, const ExpertParallelShard& ep, int max_tokens,
           ParamTable& table, SlotLayout& layout, const TensorParallelShard& tp = {});
  // Not copied or moved: at ep = 1 the layer's exchange is one of its own members.
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  void bind(float* params, float* grads);

  // y = moe(h) for a microbatch of N token rows; h and y hold this rank's rows of the
  // residual stream (N/t under sequence parallelism, else N). y is overwritten; h must stay
  // untouched until backward_weight. Every rank of the ep and tp groups must call it for
  // the same microbatches in the same order. `local` (the llama block's shared experts)
  // runs inside the call: with --moe-overlap-parts > 1 while the exchanges travel
  // (LocalWork, moe_parts.h), else after them.
  void forward(float* slot, const float* h, float* y, int N, const LocalWork& local = {});
  // dh = gradient w.r.t. h from dy (both as h), experts and router paths, plus the aux
  // loss gradient (scaled by aux_grad_scale). Overwrites dh. Collective over ep (and tp
  // without sequence parallelism). `local` as in forward.
  void backward_input(float* slot, const float* h, const float* dy, float* dh, int N,
                      const LocalWork& local = {});
  // Router and local expert weight gradients (+=); the experts' were already accumulated
  // by backward_input under ExpertParallelShard::expert_grads_in_b. No communication.
  void backward_weight(float* slot, const float* h, int N);

  // Whether the next backward_input can run work of the caller's under its first dispatch:
  // with parts, where W may run in B (expert_grads_in_b's rule: ZeRO 0-1, W right after B)
  // and nothing of the layer's gathers over tp. ModelChunk::backward hands it the weight
  // gradients of the unit above (docs/moe.md "Overlapped all-to-all"), which otherwise run
  // just before this layer's backward, in the stretch where the ranks drift apart.
  bool takes_backward_cover() const { return parts_ && expert_grads_in_b_ && tp_.size == 1; }
  // `work` runs once, in the next backward_input, after the layer's own first LocalWork
  // half, while part 0's output gradients travel. Only where takes_backward_cover().
  void cover_next_backward(std::function<void()> work);

  // The factor that turns one group's aux-loss gradient into the step's: the trainer sums
  // gradients over microbatches and dp ranks, and aux_loss is the mean over the G = dp *
  // microbatches groups, so pass 1/G (equivalently N_group / (global B*T), the CE scale
  // times the group's token count). Default 1 (a single group).
  void set_aux_grad_scale(float s) { router_.set_aux_grad_scale(s); }
  // Off during evaluation, and while full recomputation re-runs a forward
  // (model_chunk.h), so routing statistics count each training forward once.
  void set_record_stats(bool on) { router_.set_record_stats(on); }
  bool records_stats() const { return router_.records_stats(); }
  const MoeStats& stats() const { return router_.stats(); }
  void reset_stats() { router_.reset_stats(); }

  // Aux-loss-free balancing state (E): added to the scores for selection only. Not a
  // parameter (no gradient, no optimizer): checkpointed next to the optimizer state
  // (train/global_view.h, router_bias_name). Must be identical on every rank.
  std::vector<float>& router_bias() { return router_.bias(); }
  // After the optimizer step: bias_e += gamma * sign(mean(load) - load_e), where load is
  // the step's `selected` counts summed over the dp group (so every rank applies the same
  // update). No-op when --router-bias-update is 0.
  void update_router_bias(const int64_t* load);

  // --precision bf16: the fp32 stage the experts round their results and gradients
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
  // The experts' kernels' thread_local buffers, outside every arena (expert_mlp.h).
  ExpertMlp::KernelScratch kernel_scratch() const {
    return experts_->kernel_scratch(parts_ ? parts_->parts() : 1);
  }
  // The bf16 experts' row chunks (expert_mlp_bf16.h), which the planner and the memory
  // estimate model.
  static constexpr int kRowQuantum = Bf16RowChunks::kRowQuantum;
  static int bf16_chunk_rows(int max_tokens) { return Bf16RowChunks::chunk_rows(max_tokens); }

  // Global block index of this layer.
  int layer() const { return layer_; }
  int experts() const { return E_; }
  int local_experts() const { return El_; }

 private:
  // This rank's rows of a microbatch of N tokens, and where h's run of them starts.
  int local_rows(int N) const { return tp_.size > 1 ? N / tp_.size : N; }
  bool gathers() const { return tp_.size > 1 && !tp_.splits_sequence(); }
  size_t run_offset(int rows) const { return gathers() ? size_t(tp_.rank) * rows * C_ : 0; }
  ExchangeCounts exchange_counts(float* slot);
  // Rows of each local expert in expert-major order, from recv_counts (rank, local expert).
  ExpertGroups expert_groups(const int32_t* recv_counts);
  // The layer on this rank's rows: y and dh of rows rows (overwritten).
  void forward_rows(float* s, const float* h, float* y, int rows, const LocalWork& local);
  void backward_rows(float* s, const float* dy, float* dh, int rows, const LocalWork& local);
  // The same with the exchanges overlapped, part by part (parts_).
  void forward_parts(float* s, const float* h, float* y, int rows, const LocalWork& local);
  void backward_parts(float* s, const float* dy, float* dh, int rows, const LocalWork& local);
  void backward_weight_parts(float* s);
  // The gates of the kept rows by row (M), in dgates_ (free during the forward).
  const float* gates_by_row(float* s, int rows);
  // The per-token sums of n tokens' rows in the order the experts take (sums_in_row_order):
  // combine_rows / scatter_add_rows or their row-order twins (kernels/token_permutation.h).
  void combine(float* y, const float* rows, const int32_t* row_of, const float* gates, int n) const;
  void scatter(float* dh, const float* rows, const int32_t* row_of, int n) const;

  int layer_, C_, E_, k_, El_, max_rows_;
  bool expert_grads_in_b_ = false;  // ExpertParallelShard::expert_grads_in_b, with parts
  std::function<void()> cover_;     // cover_next_backward's work, until it runs
  TensorParallelShard tp_;
  IdentityExchange identity_;          // the exchange at ep = 1
  TokenExchange* exchange_ = nullptr;  // identity_ or ExpertParallelShard::exchange
  MoeRouter router_;
  std::unique_ptr<ExpertMlp> experts_;
  std::unique_ptr<MoeParts> parts_;  // null: one blocking exchange each way
  // Per-call scratch (not per microbatch), sized once: the working rows (the experts' input
  // where their slot keeps another form, their outputs, the gradient rows), the exchange's
  // staging rows, gate gradients, per-expert row offsets.
  Arena rows_, staging_, dgates_;
  std::vector<int32_t> expert_offset_;
  // Offsets in a slot. M = rows*k local assignments. int32 buffers share the float slot.
  // The router and the experts reserve their own (R rows for the experts: ep * rows *
  // min(k, E/ep), what one rank can receive).
  struct {
    size_t recv_counts;  // (ep, El)
    size_t y_perm;       // (M,C): the experts' outputs, expert-sorted, for the gates' gradient
  } off_{};
};

}  // namespace mt
