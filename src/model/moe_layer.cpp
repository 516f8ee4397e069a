#include "model/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/gelu.h"
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
      H_(cfg.hidden()),
      E_(cfg.experts),
      k_(cfg.topk),
      ep_size_(ep.size),
      max_tokens_(max_tokens),
      capacity_factor_(cfg.capacity_factor),
      alpha_(cfg.aux_loss_coef),
      gamma_(cfg.router_bias_update),
      exchange_(ep.exchange) {
  // The user-facing rules (--topk in 1..--experts, --ep divides --experts) are checked with
  // the options before any rank starts; here they are invariants.
  MT_CHECK(E_ >= 1 && k_ >= 1 && k_ <= E_, "topk ", k_, " outside 1..experts ", E_);
  MT_CHECK(E_ % ep.size == 0, "ep ", ep.size, " does not divide experts ", E_);
  MT_CHECK(ep.size == 1 ||
               (ep.exchange && ep.exchange->size() == ep.size && ep.exchange->rank() == ep.rank),
           "expert parallelism needs a TokenExchange over the ep group");
  El_ = E_ / ep.size;
  e0_ = ep.rank * El_;
  const int64_t C = C_, H = H_;
  const std::string p = "transformer.h." + std::to_string(layer) + ".mlp.";
  const float proj_std = 0.02f / std::sqrt(2.0f * cfg.layers);
  router_.weight_info = &table.add(p + "router.weight", {E_, C}, InitKind::normal, 0.02f);
  router_.in = C_, router_.out = E_;
  fc_.resize(El_);
  proj_.resize(El_);
  for (int le = 0; le < El_; ++le) {
    const std::string q = p + "experts." + std::to_string(e0_ + le) + ".";
    fc_[le].weight_info = &table.add(q + "c_fc.weight", {H, C}, InitKind::normal, 0.02f);
    fc_[le].bias_info = &table.add(q + "c_fc.bias", {H}, InitKind::zeros);
    proj_[le].weight_info = &table.add(q + "c_proj.weight", {C, H}, InitKind::normal, proj_std);
    proj_[le].bias_info = &table.add(q + "c_proj.bias", {C}, InitKind::zeros);
    fc_[le].in = C_, fc_[le].out = H_;
    proj_[le].in = H_, proj_[le].out = C_;
  }
  bias_.assign(E_, 0.0f);
  stats_.load.assign(E_, 0);
  stats_.selected.assign(E_, 0);

  // Worst case, dropless: every token can send min(k, El) of its choices to one rank, from
  // each of the ep ranks; one expert alone can receive ep * N rows.
  const size_t N = size_t(max_tokens), M = N * k_;
  max_rows_ = int(size_t(ep.size) * N * size_t(std::min(k_, El_)));
  const size_t R = size_t(max_rows_);
  off_.probs = layout.reserve(N * E_);
  off_.experts = layout.reserve(M);
  off_.gates = layout.reserve(M);
  off_.row_of = layout.reserve(M);
  off_.row_token = layout.reserve(M);
  off_.counts = layout.reserve(E_);
  off_.recv_counts = layout.reserve(E_);
  off_.f = layout.reserve(E_);
  off_.x_rows = layout.reserve(R * C_);
  off_.fc_pre = layout.reserve(R * H_);
  off_.fc_out = layout.reserve(R * H_);
  off_.y_perm = layout.reserve(M * C_);
  off_.dy_rows = layout.reserve(R * C_);
  off_.d_fc = layout.reserve(R * H_);
  off_.dlogits = layout.reserve(N * E_);
  rows_a_.resize(std::max(M, R) * C_);
  rows_b_.resize(std::max(M, R) * C_);
  dgates_.resize(M);
  send_rows_.assign(ep.size, 0);
  recv_rows_.assign(ep.size, 0);
  exp_rows_.assign(El_, 0);
  exp_off_.assign(El_ + 1, 0);
}

void MoeLayer::bind(float* params, float* grads) {
  router_.bind(params, grads);
  for (int le = 0; le < El_; ++le) {
    fc_[le].bind(params, grads);
    proj_[le].bind(params, grads);
  }
}

namespace {
int32_t* ints(float* s, size_t off) {
  return reinterpret_cast<int32_t*>(s + off);
}
}  // namespace

void MoeLayer::expert_rows(const int32_t* recv_counts) {
  // recv_counts is (source rank, local expert); rows of expert le are contiguous after
  // regrouping, sources in rank order.
  for (int le = 0; le < El_; ++le) {
    int32_t r = 0;
    for (int s = 0; s < ep_size_; ++s) r += recv_counts[s * El_ + le];
    exp_rows_[le] = r;
    exp_off_[le + 1] = exp_off_[le] + r;
  }
  for (int d = 0; d < ep_size_; ++d) send_rows_[d] = recv_rows_[d] = 0;
}

void MoeLayer::exchange(const float* send, const int32_t* send_rows, float* recv,
                        const int32_t* recv_rows) {
  exchange_->exchange_rows(send, send_rows, recv, recv_rows, C_).wait();
}

void MoeLayer::experts_forward(float* s, float* y_rows) {
  const float* x = s + off_.x_rows;
  float* fc_pre = s + off_.fc_pre;
  float* fc_out = s + off_.fc_out;
  for (int le = 0; le < El_; ++le) {
    const int rows = exp_rows_[le];
    const size_t o = size_t(exp_off_[le]);
    if (rows == 0) continue;
    fc_[le].forward(fc_pre + o * H_, x + o * C_, rows, /*with_bias=*/false);
    bias_gelu_forward(fc_out + o * H_, fc_pre + o * H_, fc_[le].b, rows, H_);
    proj_[le].forward(y_rows + o * C_, fc_out + o * H_, rows);
  }
}

void MoeLayer::experts_backward_input(float* s, float* dx_rows) {
  const float* dy = s + off_.dy_rows;
  const float* fc_pre = s + off_.fc_pre;
  float* d_fc = s + off_.d_fc;
  const size_t R = size_t(exp_off_[El_]);
  std::memset(d_fc, 0, R * H_ * sizeof(float));
  std::memset(dx_rows, 0, R * C_ * sizeof(float));
  for (int le = 0; le < El_; ++le) {
    const int rows = exp_rows_[le];
    const size_t o = size_t(exp_off_[le]);
    if (rows == 0) continue;
    proj_[le].backward_input(d_fc + o * H_, dy + o * C_, rows);
    gelu_backward(d_fc + o * H_, fc_pre + o * H_, d_fc + o * H_, size_t(rows) * H_);
    fc_[le].backward_input(dx_rows + o * C_, d_fc + o * H_, rows);
  }
}

void MoeLayer::forward(float* s, const float* h, float* y, int N) {
  MT_CHECK(N <= max_tokens_, "MoE layer got ", N, " tokens, sized for ", max_tokens_);
  float* probs = s + off_.probs;
  int32_t* experts = ints(s, off_.experts);
  float* gates = s + off_.gates;
  int32_t* row_of = ints(s, off_.row_of);
  int32_t* row_token = ints(s, off_.row_token);
  int32_t* counts = ints(s, off_.counts);
  int32_t* recv_counts = ints(s, off_.recv_counts);

  // Router.
  matmul_forward(probs, h, router_.w, nullptr, N, C_, E_);
  router_softmax(probs, probs, N, E_);
  router_top_k(experts, gates, probs, gamma_ > 0 ? bias_.data() : nullptr, N, E_, k_);
  const double aux = router_aux_loss(s + off_.f, probs, experts, N, E_, k_, alpha_);
  const int capacity = expert_capacity(N, E_, k_, capacity_factor_);
  const int M = plan_dispatch(counts, row_of, row_token, experts, N, E_, k_, capacity);
  if (record_stats_) {
    for (size_t a = 0; a < size_t(N) * k_; ++a) ++stats_.selected[experts[a]];
    for (int e = 0; e < E_; ++e) stats_.load[e] += counts[e];
    stats_.assignments += int64_t(N) * k_;
    stats_.dropped += int64_t(N) * k_ - M;
    stats_.aux_sum += aux;
    ++stats_.groups;
  }

  float* y_perm = s + off_.y_perm;
  if (ep_size_ == 1) {
    // Local: the expert-sorted order is already expert-major; no copies beyond the gather.
    std::memcpy(recv_counts, counts, size_t(E_) * sizeof(int32_t));
    expert_rows(recv_counts);
    gather_rows(s + off_.x_rows, h, row_token, M, C_);
    experts_forward(s, y_perm);
  } else {
    float* a = rows_a_.data();
    float* b = rows_b_.data();
    gather_rows(a, h, row_token, M, C_);
    exchange_->exchange_counts(counts, recv_counts, El_);
    expert_rows(recv_counts);
    for (int d = 0; d < ep_size_; ++d)
      for (int le = 0; le < El_; ++le) {
        send_rows_[d] += counts[d * El_ + le];
        recv_rows_[d] += recv_counts[d * El_ + le];
      }
    exchange(a, send_rows_.data(), b, recv_rows_.data());  // dispatch
    regroup_blocks(s + off_.x_rows, b, recv_counts, ep_size_, El_, C_, true);
    experts_forward(s, a);
    regroup_blocks(b, a, recv_counts, ep_size_, El_, C_, false);
    exchange(b, recv_rows_.data(), y_perm, send_rows_.data());  // combine
  }
  combine_rows(y, y_perm, row_of, gates, N, k_, C_);
}

void MoeLayer::backward_input(float* s, const float* h, const float* dy, float* dh, int N) {
  (void)h;  // the router's input gradient needs only its weight
  const int32_t* row_of = ints(s, off_.row_of);
  const int32_t* counts = ints(s, off_.counts);
  const int32_t* recv_counts = ints(s, off_.recv_counts);
  const float* gates = s + off_.gates;
  float* dgates = dgates_.data();
  float* a = rows_a_.data();
  float* b = rows_b_.data();

  combine_rows_backward_gates(dgates, dy, s + off_.y_perm, row_of, N, k_, C_);
  expert_rows(recv_counts);
  if (ep_size_ == 1) {
    gather_rows_scaled(s + off_.dy_rows, dy, row_of, gates, N, k_, C_);
    experts_backward_input(s, a);
    scatter_add_rows(dh, a, row_of, N, k_, C_);
  } else {
    for (int d = 0; d < ep_size_; ++d)
      for (int le = 0; le < El_; ++le) {
        send_rows_[d] += counts[d * El_ + le];
        recv_rows_[d] += recv_counts[d * El_ + le];
      }
    gather_rows_scaled(a, dy, row_of, gates, N, k_, C_);
    exchange(a, send_rows_.data(), b, recv_rows_.data());  // adjoint of combine
    regroup_blocks(s + off_.dy_rows, b, recv_counts, ep_size_, El_, C_, true);
    experts_backward_input(s, a);
    regroup_blocks(b, a, recv_counts, ep_size_, El_, C_, false);
    exchange(b, recv_rows_.data(), a, send_rows_.data());  // adjoint of dispatch
    scatter_add_rows(dh, a, row_of, N, k_, C_);
  }

  float* dlogits = s + off_.dlogits;
  router_backward(dlogits, dgates, s + off_.probs, ints(s, off_.experts), gates, s + off_.f, alpha_,
                  aux_grad_scale_, N, E_, k_);
  router_.backward_input(dh, dlogits, N);
}

void MoeLayer::backward_weight(float* s, const float* h, int N) {
  expert_rows(ints(s, off_.recv_counts));
  for (int le = 0; le < El_; ++le) {
    const int rows = exp_rows_[le];
    const size_t o = size_t(exp_off_[le]);
    if (rows == 0) continue;
    proj_[le].backward_weight(s + off_.dy_rows + o * C_, s + off_.fc_out + o * H_, rows);
    fc_[le].backward_weight(s + off_.d_fc + o * H_, s + off_.x_rows + o * C_, rows);
  }
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
