#include "model/moe_router.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/router.h"
#include "kernels/token_permutation.h"

namespace mt {

void MoeStats::reset() {
  std::fill(load.begin(), load.end(), 0);
  std::fill(selected.begin(), selected.end(), 0);
  assignments = dropped = groups = 0;
  aux_sum = 0;
}

MoeRouter::MoeRouter(const std::string& weight_name, const ModelConfig& cfg,
                     const TensorParallelShard& tp, const ContextParallelShard& cp, int max_rows,
                     ParamTable& table, SlotLayout& layout)
    : C_(cfg.dim),
      E_(cfg.experts),
      k_(cfg.topk),
      score_(cfg.router),
      gates_how_(RouterGates::of(cfg.router, cfg.topk, cfg.routed_scale)),
      capacity_factor_(cfg.capacity_factor),
      alpha_(cfg.aux_loss_coef),
      gamma_(cfg.router_bias_update),
      group_(tp, cp, cfg.seq) {
  ParamInfo& w = table.add(weight_name, {E_, C_}, InitKind::normal, 0.02f);
  // Under tp's token split each rank's gradient covers its own tokens only.
  w.tp_partial_grad = tp.size > 1;
  router_.weight_info = &w;
  router_.in = C_, router_.out = E_;
  bias_.assign(E_, 0.0f);
  stats_.load.assign(E_, 0);
  stats_.selected.assign(E_, 0);
  const size_t R = size_t(max_rows), A = R * k_;
  off_.scores = layout.reserve(R * E_);
  off_.experts = layout.reserve(A);
  off_.gates = layout.reserve(A);
  off_.row_of = layout.reserve(A);
  off_.row_token = layout.reserve(A);
  off_.counts = layout.reserve(E_);
  off_.f = layout.reserve(E_);
  off_.dlogits = layout.reserve(R * E_);
}

void MoeRouter::record(const RouteSums& g, int64_t tokens, int capacity, double aux) {
  // The drops keep each expert's first `capacity` choices of the group (token order).
  int64_t kept = 0;
  for (int e = 0; e < E_; ++e) {
    const int64_t load = capacity > 0 ? std::min<int64_t>(g.counts[e], capacity) : g.counts[e];
    stats_.selected[e] += g.counts[e];
    stats_.load[e] += load;
    kept += load;
  }
  stats_.assignments += tokens * k_;
  stats_.dropped += tokens * k_ - kept;
  stats_.aux_sum += aux;
  ++stats_.groups;
}

// The bias selects while it is updated, and when it came with the weights (a checkpoint,
// a llama file's e_score_correction_bias) though no longer updated: the model was trained
// with it. A zero bias selects as none does.
bool MoeRouter::selects_with_bias() const {
  return gamma_ > 0 || std::any_of(bias_.begin(), bias_.end(), [](float b) { return b != 0; });
}

int MoeRouter::route(float* s, const float* h, int rows) {
  float* scores = s + off_.scores;
  int32_t* experts = ints(s, off_.experts);
  matmul_forward(scores, h, router_.w, nullptr, rows, C_, E_);
  if (score_ == RouterScore::softmax)
    router_softmax(scores, scores, rows, E_);
  else
    router_sigmoid(scores, scores, rows, E_);
  router_top_k(experts, s + off_.gates, scores, selects_with_bias() ? bias_.data() : nullptr, rows,
               E_, k_, gates_how_);
  RouteSums g;
  group_.sum(g, experts, scores, rows, E_, k_, score_);
  const int64_t tokens = group_.tokens(rows);
  const double aux =
      router_aux_from_sums(s + off_.f, g.counts.data(), g.shares.data(), tokens, E_, k_, alpha_);
  const int capacity = expert_capacity(int(tokens), E_, k_, capacity_factor_);
  const int M = plan_dispatch(counts(s), ints(s, off_.row_of), ints(s, off_.row_token), experts,
                              rows, E_, k_, capacity, g.held_choices());
  if (record_stats_) record(g, tokens, capacity, aux);
  return M;
}

void MoeRouter::backward_input(float* s, const float* dgates, float* dh, int rows) {
  backward_logits(s, dgates, rows);
  add_input_grad(s, dh, rows);
}

void MoeRouter::backward_logits(float* s, const float* dgates, int rows) {
  const RouterBackward how{score_, gates_how_, alpha_, aux_grad_scale_, group_.tokens(rows)};
  router_backward(s + off_.dlogits, dgates, s + off_.scores, ints(s, off_.experts), s + off_.gates,
                  s + off_.f, how, rows, E_, k_);
}

void MoeRouter::add_input_grad(float* s, float* dh, int rows) {
  router_.backward_input(dh, s + off_.dlogits, rows);
}

void MoeRouter::backward_weight(float* s, const float* h, int rows) {
  router_.backward_weight(s + off_.dlogits, h, rows);
}

}  // namespace mt
