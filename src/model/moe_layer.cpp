#include "model/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/token_permutation.h"
#include "tensor_parallel/mappings.h"

namespace mt {

bool is_expert_param(const std::string& name) {
  return name.find(".mlp.experts.") != std::string::npos;
}

namespace {

std::string mlp_prefix(const ModelConfig& cfg, int layer) {
  return (cfg.llama() ? "model.layers." : "transformer.h.") + std::to_string(layer) + ".mlp.";
}

}  // namespace

std::string router_weight_name(const ModelConfig& cfg, int layer) {
  return mlp_prefix(cfg, layer) + (cfg.llama() ? "gate.weight" : "router.weight");
}

MoeLayer::MoeLayer(int layer, const ModelConfig& cfg, const ExpertParallelShard& ep, int max_tokens,
                   ParamTable& table, SlotLayout& layout, const TensorParallelShard& tp)
    : layer_(layer),
      C_(cfg.dim),
      E_(cfg.experts),
      k_(cfg.topk),
      max_rows_(tp.size > 1 ? max_tokens / tp.size : max_tokens),
      tp_(tp),
      exchange_(ep.exchange ? ep.exchange : &identity_),
      router_(router_weight_name(cfg, layer), cfg, tp, ep.cp, max_rows_, table, layout) {
  // The user-facing rules (--topk in 1..--experts, --ep divides --experts, tp divides the
  // token rows) are checked with the options before any rank starts; here they are
  // invariants.
  MT_CHECK(E_ >= 1 && k_ >= 1 && k_ <= E_, "topk ", k_, " outside 1..experts ", E_);
  MT_CHECK(E_ % ep.size == 0, "ep ", ep.size, " does not divide experts ", E_);
  MT_CHECK(max_tokens % tp.size == 0, "tp ", tp.size, " does not divide ", max_tokens, " tokens");
  MT_CHECK(exchange_->size() == ep.size && exchange_->rank() == ep.rank,
           "expert parallelism needs a TokenExchange over the ep group");
  El_ = E_ / ep.size;
  // Worst case, dropless: every token can send min(k, El) of its choices to one rank, from
  // each of the ep ranks; one expert alone can receive ep * rows rows.
  const size_t N = size_t(max_rows_), M = N * k_;
  const size_t R = size_t(ep.size) * N * size_t(std::min(k_, El_));
  ExpertShape shape;
  shape.kind = cfg.llama() ? ExpertKind::swiglu : ExpertKind::gelu;
  shape.prefix = mlp_prefix(cfg, layer);
  shape.dim = C_, shape.hidden = cfg.expert_hidden();
  shape.first = ep.rank * El_, shape.count = El_;
  shape.max_rows = int(R), shape.max_tokens = max_rows_;
  shape.proj_std = 0.02f / std::sqrt(2.0f * cfg.layers);
  shape.partial_grads = tp.size > 1;
  shape.dry = ep.dry;
  experts_ = make_experts(shape, ep.bf16_version, table, layout);
  off_.recv_counts = layout.reserve(E_);
  off_.y_perm = layout.reserve(M * C_);
  if (ep.overlap_parts > 1) {
    parts_ = std::make_unique<MoeParts>(ep.overlap_parts, ep.size, El_, k_, max_rows_, layout);
    expert_grads_in_b_ = ep.expert_grads_in_b;
  }
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

ExchangeCounts MoeLayer::exchange_counts(float* s) {
  return {router_.counts(s), reinterpret_cast<int32_t*>(s + off_.recv_counts), El_};
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

void MoeLayer::forward(float* s, const float* h, float* y, int N, const LocalWork& local) {
  const int rows = local_rows(N);
  MT_CHECK(rows <= max_rows_, "MoE layer got ", rows, " token rows, sized for ", max_rows_);
  if (!gathers()) return forward_rows(s, h, y, rows, local);
  // Without sequence parallelism: this rank's run of the rows, then every rank's outputs.
  float* y_run = rows_.data();  // free once forward_rows has combined
  forward_rows(s, h + run_offset(rows), y_run, rows, local);
  tp::all_gather_rows(tp_.comm, y_run, y, size_t(rows) * C_);
}

// Without parts the exchanges block, and the caller's local work runs after them: the
// un-overlapped layer, as --moe-overlap-parts 1 promises.
void MoeLayer::forward_rows(float* s, const float* h, float* y, int rows, const LocalWork& local) {
  if (parts_) return forward_parts(s, h, y, rows, local);
  const int M = router_.route(s, h, rows);
  const ExchangeCounts counts = exchange_counts(s);
  exchange_->exchange_counts(counts.send, reinterpret_cast<int32_t*>(s + off_.recv_counts), El_);
  const ExpertGroups groups = expert_groups(counts.recv);
  float* y_perm = s + off_.y_perm;

  if (!exchange_->moves_rows()) {
    // Nothing travels: the kept rows go from h straight into the experts' input form, and
    // their outputs straight to where the combine reads them, or into the combine itself.
    experts_->gather_input(s, h, router_.row_token(s), M);
    if (experts_->sums_into_tokens()) {  // the combine in the last GEMM's store
      experts_->forward_into_tokens(s, groups, y_perm, y, router_.row_token(s),
                                    gates_by_row(s, rows), rows);
      local.run_first();
      local.run_last();
      return;
    }
    experts_->forward(s, groups, nullptr, y_perm);
  } else {
    // Dispatch: the kept rows, expert-sorted, to the ranks owning their experts.
    float* x = experts_->input_rows(s, rows_.data());
    gather_rows(x, h, router_.row_token(s), M, C_);
    exchange_->dispatch(x, x, staging_.data(), counts, C_);
    float* y_rows = rows_.data();
    experts_->forward(s, groups, x, y_rows);
    // Combine: the outputs back to their tokens' rank.
    exchange_->combine(y_perm, y_rows, staging_.data(), counts, C_);
  }
  // The gate-weighted sum per token.
  combine(y, y_perm, router_.row_of(s), router_.gates(s), rows);
  local.run_first();
  local.run_last();
}

const float* MoeLayer::gates_by_row(float* s, int rows) {
  const int32_t* row_of = router_.row_of(s);
  const float* gates = router_.gates(s);
  float* by_row = dgates_.data();  // free until backward_input's gate gradients
  for (size_t a = 0; a < size_t(rows) * k_; ++a)
    if (row_of[a] >= 0) by_row[row_of[a]] = gates[a];
  return by_row;
}

void MoeLayer::combine(float* y, const float* rows, const int32_t* row_of, const float* gates,
                       int n) const {
  if (experts_->sums_in_row_order())
    combine_rows_in_row_order(y, rows, row_of, gates, n, k_, C_);
  else
    combine_rows(y, rows, row_of, gates, n, k_, C_);
}

void MoeLayer::scatter(float* dh, const float* rows, const int32_t* row_of, int n) const {
  if (experts_->sums_in_row_order())
    scatter_add_rows_in_row_order(dh, rows, row_of, n, k_, C_);
  else
    scatter_add_rows(dh, rows, row_of, n, k_, C_);
}

void MoeLayer::backward_input(float* s, const float* h, const float* dy, float* dh, int N,
                              const LocalWork& local) {
  (void)h;  // the router's input gradient needs only its weight
  const int rows = local_rows(N);
  if (!gathers()) return backward_rows(s, dy, dh, rows, local);
  // dy is whole on every tp rank: this rank's run of it; then every rank's input gradients.
  // The run's dh is written as the combines come in: into staging once the blocking one is
  // in; with parts into the rows, which their combines have left by then (each regroups
  // its rows into staging at its start), since their later combines still travel from
  // staging while the earlier parts' sums are written.
  float* dh_run = parts_ ? rows_.data() : staging_.data();
  backward_rows(s, dy + run_offset(rows), dh_run, rows, local);
  tp::all_gather_rows(tp_.comm, dh_run, dh, size_t(rows) * C_);
}

void MoeLayer::cover_next_backward(std::function<void()> work) {
  MT_CHECK(takes_backward_cover() && !cover_, "MoE layer ", layer_, ": no cover expected");
  cover_ = std::move(work);
}

void MoeLayer::backward_rows(float* s, const float* dy, float* dh, int rows,
                             const LocalWork& local) {
  if (parts_) return backward_parts(s, dy, dh, rows, local);
  const int32_t* row_of = router_.row_of(s);
  const float* gates = router_.gates(s);
  const ExchangeCounts counts = exchange_counts(s);
  const ExpertGroups groups = expert_groups(counts.recv);
  const float* y_perm = s + off_.y_perm;
  float* dgates = dgates_.data();
  float* dx_rows = rows_.data();

  // The adjoint of combine, in one pass with the gates' gradient: the gate-scaled output
  // gradients to the experts (a dispatch, unless nothing travels).
  if (!exchange_->moves_rows()) {
    experts_->gather_grad(s, dgates, dy, y_perm, row_of, gates, rows, k_);
    if (experts_->sums_into_tokens()) {  // the scatter-add in the last GEMM's store
      experts_->backward_input_into_tokens(s, groups, dh, router_.row_token(s), rows);
      router_.backward_input(s, dgates, dh, rows);
      local.run_first();
      local.run_last();
      return;
    }
    experts_->backward_input(s, groups, nullptr, dx_rows);
  } else {
    float* dy_rows = experts_->grad_rows(s, rows_.data());
    combine_rows_backward(dgates, dy_rows, dy, y_perm, row_of, gates, rows, k_, C_);
    exchange_->dispatch(dy_rows, dy_rows, staging_.data(), counts, C_);
    experts_->backward_input(s, groups, dy_rows, dx_rows);
    // The adjoint of dispatch: the input gradients back to their tokens' rank.
    exchange_->combine(dx_rows, dx_rows, staging_.data(), counts, C_);
  }
  // Summed per token; then the router's share (through the gates and the aux loss).
  scatter(dh, dx_rows, row_of, rows);
  router_.backward_input(s, dgates, dh, rows);
  local.run_first();
  local.run_last();
}

// The part-major rows travel from and back into y_perm: in forward it is the experts'
// outputs' last home anyway; in backward it is free once the gates' gradient has read it.
// The token-side work runs part by part (MoeParts::Stages), each part's on its own tokens
// and rows, so the results are those of one call over all of them, bit for bit.
void MoeLayer::forward_parts(float* s, const float* h, float* y, int rows, const LocalWork& local) {
  const int M = router_.route(s, h, rows);
  const int32_t* row_token = parts_->plan(s, router_.row_token(s), router_.row_of(s),
                                          router_.counts(s), rows, M, *exchange_);
  const int32_t* row_of = parts_->row_of(s);
  const float* gates = router_.gates(s);
  float* y_perm = s + off_.y_perm;
  float* x = experts_->input_rows(s, rows_.data());
  float* y_rows = rows_.data();
  MoeParts::Stages stages;
  stages.prepare = [&](int p) {
    const MoeParts::Span m = parts_->send_span(s, p);
    gather_rows(y_perm + m.begin * C_, h, row_token + m.begin, int(m.rows), C_);
  };
  stages.compute = [&](const ExpertGroups& g) { experts_->forward(s, g, x, y_rows); };
  stages.complete = [&](int p) {
    const int t = parts_->token_begin(p, rows), n = parts_->token_begin(p + 1, rows) - t;
    combine(y + size_t(t) * C_, y_perm, row_of + size_t(t) * k_, gates + size_t(t) * k_, n);
  };
  stages.local = local;
  parts_->run(s, *exchange_, y_perm, x, y_rows, staging_.data(), C_, stages);
}

void MoeLayer::backward_parts(float* s, const float* dy, float* dh, int rows,
                              const LocalWork& local) {
  const int32_t* row_of = parts_->row_of(s);
  const float* gates = router_.gates(s);
  float* y_perm = s + off_.y_perm;
  float* dgates = dgates_.data();
  float* dy_rows = experts_->grad_rows(s, rows_.data());
  float* dx_rows = rows_.data();
  const auto tokens = [&](int p) {
    const int t = parts_->token_begin(p, rows);
    return std::pair<size_t, int>(size_t(t), parts_->token_begin(p + 1, rows) - t);
  };
  MoeParts::Stages stages;
  stages.prepare = [&](int p) {  // the gates' gradient, and the gate-scaled rows to send
    const auto [t, n] = tokens(p);
    combine_rows_backward(dgates + t * k_, y_perm, dy + t * C_, y_perm, row_of + t * k_,
                          gates + t * k_, n, k_, C_);
  };
  stages.compute = [&](const ExpertGroups& g) { experts_->backward_input(s, g, dy_rows, dx_rows); };
  stages.complete = [&](int p) {
    const auto [t, n] = tokens(p);
    scatter(dh + t * C_, y_perm, row_of + t * k_, n);
  };
  // The router's logits gradient needs only the gates' gradient, complete once every part
  // is prepared: it is local work too. Its input gradient adds into dh after the sums. So
  // are the experts' weight gradients once the last part's experts have run (when the
  // trainer lets B accumulate them), in the one pass over every part W would make.
  // The caller's cover (the unit above's W, cover_next_backward) after the layer's own.
  stages.local.first = [&] {
    local.run_first();
    if (!cover_) return;
    const std::function<void()> work = std::move(cover_);
    cover_ = nullptr;
    work();
  };
  stages.local.last = [&] {
    local.run_last();
    router_.backward_logits(s, dgates, rows);
    if (expert_grads_in_b_) backward_weight_parts(s);
  };
  parts_->run(s, *exchange_, y_perm, dy_rows, dx_rows, staging_.data(), C_, stages);
  router_.add_input_grad(s, dh, rows);
}

void MoeLayer::backward_weight(float* s, const float* h, int N) {
  const int rows = local_rows(N);
  if (parts_) {
    if (!expert_grads_in_b_) backward_weight_parts(s);
  } else {
    experts_->backward_weight(s, expert_groups(reinterpret_cast<int32_t*>(s + off_.recv_counts)));
  }
  router_.backward_weight(s, h + run_offset(rows), rows);
}

// Every part's region in one call: each expert's weight gradient read and written once per
// pass, not once per part (MoeParts keeps one part's groups at a time: copied here).
void MoeLayer::backward_weight_parts(float* s) {
  const int P = parts_->parts();
  std::vector<int32_t> offsets(size_t(P) * (El_ + 1));
  int p = 0;
  parts_->for_each_part(s, [&](const ExpertGroups& g) {
    std::copy(g.offset, g.offset + El_ + 1, offsets.begin() + size_t(p++) * (El_ + 1));
  });
  std::vector<ExpertGroups> groups;
  for (int q = 0; q < P; ++q) groups.push_back({offsets.data() + size_t(q) * (El_ + 1), El_});
  experts_->backward_weight(s, groups.data(), P);
}

void MoeLayer::update_router_bias(const int64_t* load) {
  const float gamma = router_.bias_step();
  if (gamma <= 0) return;
  std::vector<float>& bias = router_.bias();
  double mean = 0;
  for (int e = 0; e < E_; ++e) mean += double(load[e]);
  mean /= E_;
  for (int e = 0; e < E_; ++e) {
    const double err = mean - double(load[e]);
    bias[e] += err > 0 ? gamma : err < 0 ? -gamma : 0.0f;
  }
}

}  // namespace mt
