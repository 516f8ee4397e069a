#include "model/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "comm/communicator.h"
#include "kernels/bf16.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
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
      exchange_(ep.exchange),
      bf16_(ep.bf16_version != nullptr) {
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
  // Under bf16 the buffers only a GEMM reads are bf16 (moe_layer.h).
  auto gemm_only = [&](size_t count) {
    return bf16_ ? layout.reserve_bf16(count) : layout.reserve(count);
  };
  off_.x_rows = gemm_only(R * C_);
  off_.fc_pre = layout.reserve(R * H_);
  off_.fc_out = gemm_only(R * H_);
  off_.y_perm = layout.reserve(M * C_);
  off_.dy_rows = gemm_only(R * C_);
  off_.d_fc = gemm_only(R * H_);
  off_.dlogits = layout.reserve(N * E_);
  rows_a_.resize(std::max(M, R) * C_);
  rows_b_.resize(std::max(M, R) * C_);
  dgates_.resize(M);
  send_rows_.assign(ep.size, 0);
  recv_rows_.assign(ep.size, 0);
  exp_rows_.assign(El_, 0);
  exp_off_.assign(El_ + 1, 0);
  if (bf16_) {
    for (int le = 0; le < El_; ++le) {
      fc16_.emplace_back(H * C, ep.bf16_version);
      proj16_.emplace_back(C * H, ep.bf16_version);
    }
    chunk_rows_ = bf16_chunk_rows(max_tokens_);
    const size_t width = size_t(std::max(C_, H_));
    pad_.resize(kRowQuantum * width);  // two bf16 (q, width) operands of weight_gemm
  }
}

size_t MoeLayer::bf16_stage_floats() const {
  return bf16_ ? size_t(chunk_rows_) * H_ : 0;
}

size_t MoeLayer::bf16_weight_bytes() const {
  size_t bytes = 0;
  for (int le = 0; le < El_ && bf16_; ++le) bytes += fc16_[le].bytes() + proj16_[le].bytes();
  return bytes;
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
bf16* h16(float* s, size_t off) {
  return reinterpret_cast<bf16*>(s + off);
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
}

void MoeLayer::rank_rows(const int32_t* counts, const int32_t* recv_counts) {
  for (int d = 0; d < ep_size_; ++d) {
    send_rows_[d] = recv_rows_[d] = 0;
    for (int le = 0; le < El_; ++le) {
      send_rows_[d] += counts[d * El_ + le];
      recv_rows_[d] += recv_counts[d * El_ + le];
    }
  }
}

void MoeLayer::exchange(const float* send, const int32_t* send_rows, float* recv,
                        const int32_t* recv_rows) {
  WaitedAtOnce at_once;  // no wake-up of the ep communicator's progress thread
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

// ---- --precision bf16 ------------------------------------------------------------------

template <typename F>
void MoeLayer::for_row_chunks(int rows, F&& f) const {
  int r0 = 0;
  for (int size = chunk_rows_; size >= kRowQuantum; size /= 2)
    for (; rows - r0 >= size; r0 += size) f(r0, size);
  if (r0 < rows) f(r0, rows - r0);
}

void MoeLayer::weight_gemm(float* dw, float* db, const bf16* dout, const bf16* inp, int rows,
                           int in, int out) {
  const size_t q = kRowQuantum, width = size_t(std::max(C_, H_));
  for_row_chunks(rows, [&](int r0, int rb) {
    const bf16* d = dout + size_t(r0) * out;
    const bf16* x = inp + size_t(r0) * in;
    // The rows are the reduction here: a chunk under kRowQuantum rows runs as kRowQuantum
    // (zero rows add nothing to dw and db) rather than as a new shape per row count.
    if (rb < kRowQuantum) {
      bf16* d_pad = h16(pad_.data(), 0);
      bf16* x_pad = d_pad + q * width;
      std::memcpy(d_pad, d, size_t(rb) * out * sizeof(bf16));
      std::memset(d_pad + size_t(rb) * out, 0, (q - rb) * out * sizeof(bf16));
      std::memcpy(x_pad, x, size_t(rb) * in * sizeof(bf16));
      std::memset(x_pad + size_t(rb) * in, 0, (q - rb) * in * sizeof(bf16));
      d = d_pad, x = x_pad, rb = kRowQuantum;
    }
    matmul_bf16_backward_weight(dw, db, d, x, rb, in, out);
  });
}

// Per chunk of an expert's rows: fc (fp32 out, kept for GELU's backward), bias + GELU into
// the stage, rounded into fc_out, then c_proj with its bias.
void MoeLayer::experts_forward_bf16(float* s, float* y_rows) {
  MT_CHECK(stage_ != nullptr, "MoE layer ", layer_, ": no bf16 stage set");
  const bf16* x = h16(s, off_.x_rows);
  float* fc_pre = s + off_.fc_pre;
  bf16* fc_out = h16(s, off_.fc_out);
  for (int le = 0; le < El_; ++le) {
    const int rows = exp_rows_[le];
    if (rows == 0) continue;
    const bf16* w_fc = fc16_[le].get(fc_[le].w);
    const bf16* w_proj = proj16_[le].get(proj_[le].w);
    const float* b_proj = proj_[le].b;
    for_row_chunks(rows, [&](int r0, int rb) {
      const size_t r = size_t(exp_off_[le]) + r0;
      matmul_bf16_forward(fc_pre + r * H_, x + r * C_, w_fc, nullptr, rb, C_, H_);
      bias_gelu_forward(stage_, fc_pre + r * H_, fc_[le].b, rb, H_);
      to_bf16(fc_out + r * H_, stage_, size_t(rb) * H_);
      matmul_bf16_forward(y_rows + r * C_, fc_out + r * H_, w_proj, b_proj, rb, H_, C_);
    });
  }
}

// Per chunk: c_proj's input gradient into the stage, through GELU's backward, rounded into
// d_fc (W reads it too), then fc's input gradient. Every row belongs to an expert, so the
// overwriting GEMMs leave nothing to clear.
void MoeLayer::experts_backward_input_bf16(float* s, float* dx_rows) {
  const bf16* dy = h16(s, off_.dy_rows);
  const float* fc_pre = s + off_.fc_pre;
  bf16* d_fc = h16(s, off_.d_fc);
  for (int le = 0; le < El_; ++le) {
    const int rows = exp_rows_[le];
    if (rows == 0) continue;
    const bf16* w_fc = fc16_[le].get(fc_[le].w);
    const bf16* w_proj = proj16_[le].get(proj_[le].w);
    for_row_chunks(rows, [&](int r0, int rb) {
      const size_t r = size_t(exp_off_[le]) + r0;
      matmul_bf16_backward_input(stage_, dy + r * C_, w_proj, rb, H_, C_, /*accumulate=*/false);
      gelu_backward(stage_, fc_pre + r * H_, stage_, size_t(rb) * H_);
      to_bf16(d_fc + r * H_, stage_, size_t(rb) * H_);
      matmul_bf16_backward_input(dx_rows + r * C_, d_fc + r * H_, w_fc, rb, C_, H_,
                                 /*accumulate=*/false);
    });
  }
}

void MoeLayer::experts_backward_weight_bf16(float* s) {
  const bf16* x = h16(s, off_.x_rows);
  const bf16* fc_out = h16(s, off_.fc_out);
  const bf16* dy = h16(s, off_.dy_rows);
  const bf16* d_fc = h16(s, off_.d_fc);
  for (int le = 0; le < El_; ++le) {
    const int rows = exp_rows_[le];
    const size_t o = size_t(exp_off_[le]);
    if (rows == 0) continue;
    weight_gemm(proj_[le].dw, proj_[le].db, dy + o * C_, fc_out + o * H_, rows, H_, C_);
    weight_gemm(fc_[le].dw, fc_[le].db, d_fc + o * H_, x + o * C_, rows, C_, H_);
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
    if (bf16_) {  // gathered in fp32, rounded once into the slot
      gather_rows(rows_a_.data(), h, row_token, M, C_);
      to_bf16(h16(s, off_.x_rows), rows_a_.data(), size_t(M) * C_);
      experts_forward_bf16(s, y_perm);
    } else {
      gather_rows(s + off_.x_rows, h, row_token, M, C_);
      experts_forward(s, y_perm);
    }
  } else {
    float* a = rows_a_.data();
    float* b = rows_b_.data();
    gather_rows(a, h, row_token, M, C_);
    exchange_->exchange_counts(counts, recv_counts, El_);
    expert_rows(recv_counts);
    rank_rows(counts, recv_counts);
    exchange(a, send_rows_.data(), b, recv_rows_.data());  // dispatch
    // The dispatch moves fp32 rows; bf16 rounds them after (the same values either way).
    if (bf16_) {
      regroup_blocks(a, b, recv_counts, ep_size_, El_, C_, true);
      to_bf16(h16(s, off_.x_rows), a, size_t(exp_off_[El_]) * C_);
      experts_forward_bf16(s, a);
    } else {
      regroup_blocks(s + off_.x_rows, b, recv_counts, ep_size_, El_, C_, true);
      experts_forward(s, a);
    }
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
    if (bf16_) {
      gather_rows_scaled(b, dy, row_of, gates, N, k_, C_);
      to_bf16(h16(s, off_.dy_rows), b, size_t(exp_off_[El_]) * C_);
      experts_backward_input_bf16(s, a);
    } else {
      gather_rows_scaled(s + off_.dy_rows, dy, row_of, gates, N, k_, C_);
      experts_backward_input(s, a);
    }
    scatter_add_rows(dh, a, row_of, N, k_, C_);
  } else {
    rank_rows(counts, recv_counts);
    gather_rows_scaled(a, dy, row_of, gates, N, k_, C_);
    exchange(a, send_rows_.data(), b, recv_rows_.data());  // adjoint of combine
    if (bf16_) {
      regroup_blocks(a, b, recv_counts, ep_size_, El_, C_, true);
      to_bf16(h16(s, off_.dy_rows), a, size_t(exp_off_[El_]) * C_);
      experts_backward_input_bf16(s, a);
    } else {
      regroup_blocks(s + off_.dy_rows, b, recv_counts, ep_size_, El_, C_, true);
      experts_backward_input(s, a);
    }
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
  if (bf16_) {
    experts_backward_weight_bf16(s);
    router_.backward_weight(s + off_.dlogits, h, N);
    return;
  }
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
