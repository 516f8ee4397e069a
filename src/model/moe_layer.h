// Mixture-of-experts MLP (CONTRACTS.md §1, MoE variant), the drop-in for a Block's dense
// MLP: y (N, C) = sum over the token's kept choices of gate * expert_e(h), where h (N, C)
// is ln_2's output and the caller adds y to the residual. Each expert is the dense MLP
// (c_fc, tanh GELU, c_proj) with its own weights.
//
// One forward, for N tokens of this rank's microbatch (one aux/capacity group):
//   router: logits = h @ router.weight^T, softmax, top-k, gates, aux loss (kernels/router.h)
//   plan:   capacity drops and the stable sort by expert (kernels/token_permutation.h)
//   dispatch: rows to the ep ranks owning their experts (TokenExchange; skipped at ep = 1)
//   experts: per local expert one GEMM pair over its contiguous rows
//   combine: results back to their rank, then gate-weighted sum per token
// Backward mirrors it: the gate gradients (dy . expert output) feed the router with the aux
// term; gate * dy goes to the experts by the same dispatch, their input gradients come
// back by the same combine. backward_input (B) leaves in the slot what backward_weight (W)
// needs, so W does no communication.
//
// Expert parallelism: ep rank r holds experts r*E/ep .. (r+1)*E/ep - 1 and registers only
// those (global names). Gradient reduction rule for the data-parallel reducer: expert
// tensors (is_expert_param) are summed over ParallelContext::ep_replica, every other
// tensor of the layer over ParallelContext::dp; both then take the dense tensors' factor.
//
// --precision bf16 (ExpertParallelShard::bf16_version non-null; docs/precision.md): the
// experts' GEMMs multiply bf16 copies of their weights (converted once per change of the
// weights, tp/bf16_weight.h) by bf16 inputs with fp32 accumulation, and the slot keeps
// what only a GEMM reads in bf16, as the dense MLP does: x_rows, fc_out, dy_rows, d_fc.
// fc_pre (GELU's input), the expert outputs y_perm (the gates' gradient reads them), the
// router (GEMM, softmax, top-k, aux loss), all gradients and the ep exchanges stay fp32.
// The router stays fp32 because a routing decision is a comparison: a bf16-rounded logit
// flips near-ties between experts, and a flipped choice changes a token's whole output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "model/activation_pool.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/param_table.h"
#include "model/token_exchange.h"
#include "parallel/tensor_parallel/bf16_weight.h"

namespace mt {

struct ExpertParallelShard {
  int rank = 0, size = 1;
  TokenExchange* exchange = nullptr;  // null when size == 1
  // --precision bf16: the model's weight version (GPT::weights_changed); null for fp32.
  // Carried here because the Block passes this struct to the layer unchanged.
  const uint64_t* bf16_version = nullptr;
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
  size_t bf16_stage_floats() const;
  void set_bf16_stage(float* stage) { stage_ = stage; }
  // Bytes of the local experts' bf16 weight copies (0 in fp32).
  size_t bf16_weight_bytes() const;
  // oneDNN builds (and its per-thread cache keeps) one primitive per GEMM shape, and an
  // expert's row count changes with every microbatch's routing: under bf16 the experts'
  // GEMMs run over chunks of kRowQuantum * 2^j rows, at most bf16_chunk_rows(max_tokens),
  // plus a last one of fewer rows, which the forward and input-gradient GEMMs split as
  // matmul_bf16_row_pieces does and the weight-gradient GEMMs zero-pad to kRowQuantum, so
  // the shapes stay a handful per layer instead of one per distinct load. The stage holds
  // one chunk: bf16_chunk_rows x H floats.
  static constexpr int kRowQuantum = 64;
  static int bf16_chunk_rows(int max_tokens) {
    int rows = kRowQuantum;
    while (rows * 2 <= max_tokens) rows *= 2;
    return rows;
  }

  // Global block index of this layer (transformer.h.{layer}).
  int layer() const { return layer_; }
  int experts() const { return E_; }
  int local_experts() const { return El_; }

 private:
  // Rows and offsets of each local expert in expert-major order, from recv_counts.
  void expert_rows(const int32_t* recv_counts);
  // Rows sent to and received from each ep rank (counts, recv_counts: (rank, local expert)).
  void rank_rows(const int32_t* counts, const int32_t* recv_counts);
  void experts_forward(float* s, float* y_rows);
  void experts_backward_input(float* s, float* dx_rows);
  // --precision bf16 twins of the two above (x_rows, dy_rows already rounded in the slot).
  void experts_forward_bf16(float* s, float* y_rows);
  void experts_backward_input_bf16(float* s, float* dx_rows);
  void experts_backward_weight_bf16(float* s);
  // Calls f(r0, rb) over [0, rows) in chunks of kRowQuantum * 2^j rows (largest first, at
  // most chunk_rows_) and a last one of fewer than kRowQuantum rows.
  template <typename F>
  void for_row_chunks(int rows, F&& f) const;
  // dw += dout^T @ inp, db += column sums of dout, over rows in the same chunks; a chunk
  // under kRowQuantum rows runs as kRowQuantum rows through the zero-padded pad_ buffers.
  void weight_gemm(float* dw, float* db, const bf16* dout, const bf16* inp, int rows, int in,
                   int out);
  // Sends rows (send_rows[d] to rank d) and waits; recv gets recv_rows[s] from rank s.
  void exchange(const float* send, const int32_t* send_rows, float* recv, const int32_t* recv_rows);

  int layer_, C_, H_, E_, k_, El_, e0_, ep_size_, max_tokens_, max_rows_;
  float capacity_factor_, alpha_, gamma_;
  float aux_grad_scale_ = 1.0f;
  bool record_stats_ = true;
  TokenExchange* exchange_ = nullptr;
  Linear router_;
  std::vector<Linear> fc_, proj_;  // per local expert
  std::vector<float> bias_;
  MoeStats stats_;
  // Per-call scratch (not per microbatch), sized once: two row buffers, gate gradients,
  // per-rank row counts and per-expert row offsets.
  Arena rows_a_, rows_b_, dgates_;
  std::vector<int32_t> send_rows_, recv_rows_, exp_rows_, exp_off_;
  // --precision bf16.
  bool bf16_ = false;
  std::vector<tp::Bf16Weight> fc16_, proj16_;  // per local expert
  float* stage_ = nullptr;                     // chunk_rows_ x H, shared (set_bf16_stage)
  int chunk_rows_ = 0;                         // largest chunk: kRowQuantum * 2^j
  // Two bf16 operands of kRowQuantum x max(C, H) each (weight_gemm's padded chunk).
  Arena pad_;
  // Offsets in a slot. N = max tokens, M = N*k local assignments, R = rows an expert rank
  // can receive (ep * N * min(k, E/ep)). int32 buffers share the float slot (same size).
  struct {
    size_t probs, experts, gates, row_of, row_token, counts, recv_counts, f;  // (N,E) (N,k)..
    size_t x_rows, fc_pre, fc_out, y_perm;  // (R,C) (R,H) (R,H) (M,C)
    size_t dy_rows, d_fc, dlogits;          // (R,C) (R,H) (N,E): kept for W
    size_t n_rows;                          // 1 int: rows of this microbatch's experts
  } off_{};
};

}  // namespace mt
