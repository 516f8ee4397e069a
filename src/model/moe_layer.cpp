#include "model/moe_layer.h"

#include <algorithm>
#include <cmath>

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

bool is_expert_param(const std::string& name) {
  return name.find(".mlp.experts.") != std::string::npos;
}

MoeLayer::MoeLayer(int layer, const ModelConfig& cfg, const ExpertParallelShard& ep, int max_tokens,
                   ParamTable& table, SlotLayout& layout)
    : layer_(layer),
      C_(cfg.dim),
      E_(cfg.experts),
      k_(cfg.topk),
      max_tokens_(max_tokens),
      capacity_factor_(cfg.capacity_factor),
      alpha_(cfg.aux_loss_coef),
      gamma_(cfg.router_bias_update),
      exchange_(ep.exchange ? ep.exchange : &identity_) {
  // The user-facing rules (--topk in 1..--experts, --ep divides --experts) are checked with
  // the options before any rank starts; here they are invariants.
  MT_CHECK(E_ >= 1 && k_ >= 1 && k_ <= E_, "topk ", k_, " outside 1..experts ", E_);
  MT_CHECK(E_ % ep.size == 0, "ep ", ep.size, " does not divide experts ", E_);
  MT_CHECK(exchange_->size() == ep.size && exchange_->rank() == ep.rank,
           "expert parallelism needs a TokenExchange over the ep group");
  El_ = E_ / ep.size;
  const std::string p = "transformer.h." + std::to_string(layer) + ".mlp.";
  router_.weight_info = &table.add(p + "router.weight", {E_, C_}, InitKind::normal, 0.02f);
  router_.in = C_, router_.out = E_;
  // Worst case, dropless: every token can send min(k, El) of its choices to one rank, from
  // each of the ep ranks; one expert alone can receive ep * N rows.
  const size_t N = size_t(max_tokens), M = N * k_;
  const size_t R = size_t(ep.size) * N * size_t(std::min(k_, El_));
  ExpertShape shape;
  shape.prefix = p;
  shape.dim = C_, shape.hidden = cfg.hidden();
  shape.first = ep.rank * El_, shape.count = El_;
  shape.max_rows = int(R), shape.max_tokens = max_tokens;
  shape.proj_std = 0.02f / std::sqrt(2.0f * cfg.layers);
  shape.dry = ep.dry;
  experts_ = make_gelu_experts(shape, ep.bf16_version, table, layout);
  bias_.assign(E_, 0.0f);
  stats_.load.assign(E_, 0);
  stats_.selected.assign(E_, 0);

  off_.probs = layout.reserve(N * E_);
  off_.experts = layout.reserve(M);
  off_.gates = layout.reserve(M);
  off_.row_of = layout.reserve(M);
  off_.row_token = layout.reserve(M);
  off_.counts = layout.reserve(E_);
  off_.recv_counts = layout.reserve(E_);
  off_.f = layout.reserve(E_);
  off_.y_perm = layout.reserve(M * C_);
  off_.dlogits = layout.reserve(N * E_);
  const Arena::Mode mode = ep.dry ? Arena::Mode::dry : Arena::Mode::allocate;
  rows_ = Arena(std::max(M, R) * C_, mode);
  staging_ = Arena(std::max(M, R) * C_, mode);
  dgates_ = Arena(M, mode);
  expert_offset_.assign(El_ + 1, 0);
}

void MoeLayer::bind(float* params, float* grads) {
  router_.bind(params, grads);
  experts_->bind(params, grads);
}

namespace {
int32_t* ints(float* s, size_t off) {
  return reinterpret_cast<int32_t*>(s + off);
}
}  // namespace

ExchangeCounts MoeLayer::exchange_counts(float* s) const {
  return {ints(s, off_.counts), ints(s, off_.recv_counts), El_};
}

ExpertGroups MoeLayer::expert_groups(const int32_t* recv_counts) {
  // recv_counts is (source rank, local expert); rows of expert le are contiguous after the
  // dispatch, sources in rank order.
  const int ranks = exchange_->size();
  for (int le = 0; le < El_; ++le) {
    int32_t r = 0;
    for (int s = 0; s < ranks; ++s) r += recv_counts[s * El_ + le];
    expert_offset_[le + 1] = expert_offset_[le] + r;
  }
  return {expert_offset_.data(), El_};
}

int MoeLayer::route(float* s, const float* h, int N) {
  float* probs = s + off_.probs;
  int32_t* experts = ints(s, off_.experts);
  float* gates = s + off_.gates;
  matmul_forward(probs, h, router_.w, nullptr, N, C_, E_);
  router_softmax(probs, probs, N, E_);
  router_top_k(experts, gates, probs, gamma_ > 0 ? bias_.data() : nullptr, N, E_, k_);
  const double aux = router_aux_loss(s + off_.f, probs, experts, N, E_, k_, alpha_);
  const int capacity = expert_capacity(N, E_, k_, capacity_factor_);
  int32_t* counts = ints(s, off_.counts);
  const int M = plan_dispatch(counts, ints(s, off_.row_of), ints(s, off_.row_token), experts, N, E_,
                              k_, capacity);
  if (record_stats_) record_stats(experts, counts, N, M, aux);
  return M;
}

void MoeLayer::record_stats(const int32_t* experts, const int32_t* counts, int N, int M,
                            double aux) {
  for (size_t a = 0; a < size_t(N) * k_; ++a) ++stats_.selected[experts[a]];
  for (int e = 0; e < E_; ++e) stats_.load[e] += counts[e];
  stats_.assignments += int64_t(N) * k_;
  stats_.dropped += int64_t(N) * k_ - M;
  stats_.aux_sum += aux;
  ++stats_.groups;
}

void MoeLayer::forward(float* s, const float* h, float* y, int N) {
  MT_CHECK(N <= max_tokens_, "MoE layer got ", N, " tokens, sized for ", max_tokens_);
  const int M = route(s, h, N);
  const ExchangeCounts counts = exchange_counts(s);

  // Dispatch: the kept rows, expert-sorted, to the ranks owning their experts.
  float* x = experts_->input_rows(s, rows_.data());
  gather_rows(x, h, ints(s, off_.row_token), M, C_);
  exchange_->exchange_counts(counts.send, ints(s, off_.recv_counts), El_);
  const ExpertGroups groups = expert_groups(counts.recv);
  exchange_->dispatch(x, x, staging_.data(), counts, C_);

  float* y_rows = rows_.data();
  experts_->forward(s, groups, x, y_rows);

  // Combine: the outputs back to their tokens' rank, then the gate-weighted sum per token.
  float* y_perm = s + off_.y_perm;
  exchange_->combine(y_perm, y_rows, staging_.data(), counts, C_);
  combine_rows(y, y_perm, ints(s, off_.row_of), s + off_.gates, N, k_, C_);
}

void MoeLayer::backward_input(float* s, const float* h, const float* dy, float* dh, int N) {
  (void)h;  // the router's input gradient needs only its weight
  const int32_t* row_of = ints(s, off_.row_of);
  const float* gates = s + off_.gates;
  const ExchangeCounts counts = exchange_counts(s);
  const ExpertGroups groups = expert_groups(counts.recv);
  float* dgates = dgates_.data();
  combine_rows_backward_gates(dgates, dy, s + off_.y_perm, row_of, N, k_, C_);

  // The adjoint of combine: the gate-scaled output gradients to the experts (a dispatch).
  float* dy_rows = experts_->grad_rows(s, rows_.data());
  gather_rows_scaled(dy_rows, dy, row_of, gates, N, k_, C_);
  exchange_->dispatch(dy_rows, dy_rows, staging_.data(), counts, C_);

  float* dx_rows = rows_.data();
  experts_->backward_input(s, groups, dy_rows, dx_rows);

  // The adjoint of dispatch: the input gradients back to their tokens' rank, summed per token.
  exchange_->combine(dx_rows, dx_rows, staging_.data(), counts, C_);
  scatter_add_rows(dh, dx_rows, row_of, N, k_, C_);

  float* dlogits = s + off_.dlogits;
  router_backward(dlogits, dgates, s + off_.probs, ints(s, off_.experts), gates, s + off_.f, alpha_,
                  aux_grad_scale_, N, E_, k_);
  router_.backward_input(dh, dlogits, N);
}

void MoeLayer::backward_weight(float* s, const float* h, int N) {
  experts_->backward_weight(s, expert_groups(ints(s, off_.recv_counts)));
  router_.backward_weight(s + off_.dlogits, h, N);
}

void MoeLayer::update_router_bias(const int64_t* load) {
  if (gamma_ <= 0) return;
  double mean = 0;
  for (int e = 0; e < E_; ++e) mean += double(load[e]);
  mean /= E_;
  for (int e = 0; e < E_; ++e) {
    const double err = mean - double(load[e]);
    bias_[e] += err > 0 ? gamma_ : err < 0 ? -gamma_ : 0.0f;
  }
}

}  // namespace mt
