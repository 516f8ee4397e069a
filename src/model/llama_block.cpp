#include "model/llama_block.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "kernels/reduce.h"
#include "model/flash_core.h"

namespace mt {

namespace {

ShardSpec rows_of(int64_t start, int64_t len) {
  return {0, {{start, len}}};
}
ShardSpec cols_of(int64_t start, int64_t len) {
  return {1, {{start, len}}};
}

}  // namespace

LlamaBlock::LlamaBlock(int layer, const ModelConfig& cfg, const TensorParallelShard& tp, int max_b,
                       ParamTable& table, SlotLayout& layout, const ExpertParallelShard& ep,
                       const uint64_t* bf16_version, const BlockContext& context)
    : C_(cfg.dim),
      T_(cfg.seq),
      max_b_(max_b),
      layer_(layer),
      hd_(cfg.head_dim()),
      tp_(tp),
      sp_(tp.splits_sequence()),
      bf16_(bf16_version != nullptr),
      context_(context),
      dropout_(context.dropout && context.dropout->p > 0 ? context.dropout : nullptr) {
  // --tp divides --heads and --kv-heads: checked with the options before any rank starts.
  MT_CHECK(cfg.heads % tp.size == 0 && cfg.kv() % tp.size == 0, "tp ", tp.size,
           " does not divide heads ", cfg.heads, " and kv heads ", cfg.kv());
  MT_CHECK(context.rope && context.positions, "a llama block needs the chunk's RoPE table");
  Hl_ = cfg.heads / tp.size;
  Hkvl_ = cfg.kv() / tp.size;
  const bool moe = is_moe_layer(cfg, layer);
  // The dense MLP, or in an MoE layer the shared experts' SwiGLU (none when S is 0): both
  // column/row-parallel like Megatron's MLP (tp divides the width: checked with the options).
  const int F = moe ? cfg.shared_hidden() : cfg.hidden();
  MT_CHECK(F % tp.size == 0, "tp ", tp.size, " does not divide the MLP width ", F);
  Fl_ = F / tp.size;
  has_mlp_ = F > 0;
  register_params(layer, cfg, moe, table);
  if (moe) {
    moe_ = std::make_unique<MoeLayer>(layer, cfg, ep, max_b * cfg.seq, table, layout, tp);
    if (has_mlp_) register_mlp(layer_prefix(layer) + "mlp.shared_experts.", cfg, table);
  }
  qkv_ = tp::ColumnParallelLinear(tp, C_, qkv_cols());
  o_proj_ = tp::RowParallelLinear(tp, q_cols(), C_);
  gate_up_ = tp::ColumnParallelLinear(tp, C_, 2 * Fl_);
  down_ = tp::RowParallelLinear(tp, Fl_, C_);
  if (bf16_) {
    qkv_.enable_bf16(bf16_version);
    o_proj_.enable_bf16(bf16_version);
    if (has_mlp_) {  // the routed experts hold bf16 copies of their own (moe_layer.h)
      gate_up_.enable_bf16(bf16_version);
      down_.enable_bf16(bf16_version);
    }
  }
  reserve_buffers(layout, moe);
}

std::string LlamaBlock::layer_prefix(int layer) {
  return "model.layers." + std::to_string(layer) + ".";
}

// In the order of the file format (§9). q, k, v (and gate, up) follow each other in the arena
// so that one GEMM multiplies them (llama_block.h). An MoE layer's router and experts follow
// post_attention_layernorm (MoeLayer), then its shared experts (register_mlp).
void LlamaBlock::register_params(int layer, const ModelConfig& cfg, bool moe, ParamTable& table) {
  const int64_t C = C_, H = cfg.heads, Hkv = cfg.kv(), hd = hd_, r = tp_.rank;
  const bool split = tp_.size > 1;
  const std::string p = layer_prefix(layer);
  const float proj_std = 0.02f / std::sqrt(2.0f * cfg.layers);
  auto part = [&](ShardSpec spec) { return split ? spec : ShardSpec{}; };
  const auto next = Placement::after_previous;

  norm1_ = Norm(NormKind::rmsnorm, p + "input_layernorm", C_, cfg.norm_eps, sp_, table);
  q_ = &table.add(p + "self_attn.q_proj.weight", {H * hd, C}, InitKind::normal, 0.02f,
                  part(rows_of(r * Hl_ * hd, Hl_ * hd)));
  table.add(p + "self_attn.k_proj.weight", {Hkv * hd, C}, InitKind::normal, 0.02f,
            part(rows_of(r * Hkvl_ * hd, Hkvl_ * hd)), next);
  table.add(p + "self_attn.v_proj.weight", {Hkv * hd, C}, InitKind::normal, 0.02f,
            part(rows_of(r * Hkvl_ * hd, Hkvl_ * hd)), next);
  o_ = &table.add(p + "self_attn.o_proj.weight", {C, H * hd}, InitKind::normal, proj_std,
                  part(cols_of(r * Hl_ * hd, Hl_ * hd)));
  norm2_ = Norm(NormKind::rmsnorm, p + "post_attention_layernorm", C_, cfg.norm_eps, sp_, table);
  if (!moe) register_mlp(p + "mlp.", cfg, table);
}

// A SwiGLU MLP of width Fl_ * tp under `prefix` ({gate,up,down}_proj.weight): the dense MLP,
// or the shared experts (§9a: their down_proj is initialised as every down_proj).
void LlamaBlock::register_mlp(const std::string& prefix, const ModelConfig& cfg,
                              ParamTable& table) {
  const int64_t C = C_, F = int64_t(Fl_) * tp_.size, r = tp_.rank;
  const bool split = tp_.size > 1;
  auto part = [&](ShardSpec spec) { return split ? spec : ShardSpec{}; };
  const float proj_std = 0.02f / std::sqrt(2.0f * cfg.layers);
  gate_ = &table.add(prefix + "gate_proj.weight", {F, C}, InitKind::normal, 0.02f,
                     part(rows_of(r * Fl_, Fl_)));
  table.add(prefix + "up_proj.weight", {F, C}, InitKind::normal, 0.02f, part(rows_of(r * Fl_, Fl_)),
            Placement::after_previous);
  down_w_ = &table.add(prefix + "down_proj.weight", {C, F}, InitKind::normal, proj_std,
                       part(cols_of(r * Fl_, Fl_)));
}

void LlamaBlock::reserve_buffers(SlotLayout& layout, bool moe) {
  auto gemm_only = [&](size_t count) { return reserve_gemm_operand(layout, count, bf16_); };
  const size_t N = size_t(max_b_) * T_, Nl = sp_ ? N / tp_.size : N;
  off_.n1 = gemm_only(Nl * C_);
  norm1_.reserve(layout, Nl);
  off_.qkv = layout.reserve(N * qkv_cols());
  off_.att_out = gemm_only(N * q_cols());
  off_.lse = layout.reserve(size_t(max_b_) * Hl_ * T_);
  // One worker on this host: the flash forward's packed q and K, read again by the backward
  // (a ring step's keys visit and leave; a GPU's fused kernel keeps no such copy).
  off_.packed =
      context_.cp || context_.kernels == KernelTarget::gpu
          ? SIZE_MAX
          : layout.reserve(flash_attention_packed_floats(attention_args(nullptr, max_b_, T_),
                                                         context_.kernels == KernelTarget::profile));
  off_.x_mid = layout.reserve(Nl * C_);
  off_.n2 = moe ? layout.reserve(Nl * C_) : gemm_only(Nl * C_);  // the router reads fp32
  // The shared experts' GEMM operand: n2 itself in fp32, a bf16 copy under bf16; and their
  // output (forward) or input gradient (B), added to the routed experts'.
  const bool shared = moe && has_mlp_;
  off_.n2_mlp = shared && bf16_ ? layout.reserve_bf16(Nl * C_) : off_.n2;
  if (shared) off_.shared = layout.reserve(Nl * C_);
  norm2_.reserve(layout, Nl);
  const size_t nf = has_mlp_ ? N * Fl_ : 0;  // the routed experts keep their own buffers
  off_.gu = layout.reserve(2 * nf);
  off_.h = gemm_only(nf);
  off_.d_gu = gemm_only(2 * nf);
  off_.d_n2 = layout.reserve(Nl * C_);
  off_.dx_mid = layout.reserve(Nl * C_);
  off_.d_att_out = layout.reserve(N * q_cols());
  off_.d_qkv = gemm_only(N * qkv_cols());
  off_.d_n1 = layout.reserve(Nl * C_);
  if (dropout_) {
    off_.d_attn_branch = layout.reserve(Nl * C_);
    off_.d_mlp_branch = layout.reserve(Nl * C_);
  }
}

FlashAttention LlamaBlock::attention_args(const float* qkv, int b, int T, float* s) const {
  FlashAttention a;
  a.B = b, a.Tq = a.Tk = T;
  a.H = Hl_, a.Hkv = Hkvl_, a.hd = hd_;
  a.q = qkv;
  a.k = qkv + q_cols();
  a.v = qkv + q_cols() + Hkvl_ * hd_;
  a.ldq = a.ldk = a.ldv = size_t(qkv_cols());
  a.qpos = a.kpos = context_.positions;
  a.rope = context_.rope;
  a.precision = bf16_ ? FlashPrecision::bf16 : FlashPrecision::fp32;
  if (dropout_) a.dropout = dropout_->attention(layer_, tp_.rank * Hl_);
  if (s && off_.packed != SIZE_MAX) a.packed = s + off_.packed;
  return a;
}

void LlamaBlock::set_bf16_scratch(float* stage, bf16* g16) {
  scratch_.stage = stage;
  scratch_.gather = g16;
  if (moe_) moe_->set_bf16_stage(stage);
}

size_t LlamaBlock::bf16_stage_floats() const {
  // fp32 results before rounding: the attention output (N, Hl hd), the SwiGLU output's
  // gradient (N, Fl), the attention's input gradient (N, qkv_cols); the experts' chunks.
  if (!bf16_) return 0;
  const size_t N = size_t(max_b_) * T_;
  const size_t own = N * std::max({size_t(qkv_cols()), size_t(Fl_), size_t(C_)});
  return moe_ ? std::max(own, moe_->bf16_stage_floats()) : own;
}

size_t LlamaBlock::bf16_gather_values() const {
  // Gathered inputs of the column-parallel linears (N, C) and the row-parallel linears'
  // rounded output gradients (N, C).
  return bf16_ ? size_t(max_b_) * T_ * C_ : 0;
}

size_t LlamaBlock::linear_scratch_bytes() const {
  // Every linear's weight gradient runs on all b T rows of a microbatch (gathered under
  // sequence parallelism); an MoE block's dense MLP is not built.
  const int N = max_b_ * T_;
  const bool any = context_.kernels == KernelTarget::profile;  // model/kernel_target.h
  size_t bytes =
      std::max(qkv_.weight_grad_scratch_bytes(N, any), o_proj_.weight_grad_scratch_bytes(N, any));
  if (!moe_)
    bytes = std::max({bytes, gate_up_.weight_grad_scratch_bytes(N, any),
                      down_.weight_grad_scratch_bytes(N, any)});
  return bytes;
}

size_t LlamaBlock::bf16_weight_bytes() const {
  return qkv_.bf16_weight_bytes() + o_proj_.bf16_weight_bytes() + gate_up_.bf16_weight_bytes() +
         down_.bf16_weight_bytes() + (moe_ ? moe_->bf16_weight_bytes() : 0);
}

void LlamaBlock::bf16_copies(std::vector<Bf16CopyTarget>& out) const {
  for (const auto* l : {&qkv_, &gate_up_}) l->bf16_copies(out);
  for (const auto* l : {&o_proj_, &down_}) l->bf16_copies(out);
}

size_t LlamaBlock::forward_scratch_floats() const {
  if (context_.kernels == KernelTarget::gpu) return 0;  // a GPU's fused forward: tiles on chip
  return counted_flash_forward_scratch_floats(context_.kernels, context_.profile,
                                              attention_args(nullptr, max_b_, T_));
}

size_t LlamaBlock::attention_scratch_floats() const {
  // B's workspace, used in turn: the SwiGLU output's gradient (N, Fl) (fp32 only; bf16 takes
  // the stage); then the flash backward's scratch and the D rows (b, Hl, T).
  const size_t N = size_t(max_b_) * T_;
  // A GPU's fused backward keeps the D rows only, its tiles on chip (model/kernel_target.h).
  const size_t attention =
      context_.kernels == KernelTarget::gpu
          ? size_t(max_b_) * Hl_ * T_
          : counted_flash_core_backward_scratch_floats(context_.kernels, context_.profile,
                                                       attention_args(nullptr, max_b_, T_));
  return std::max(bf16_ || !has_mlp_ ? 0 : N * Fl_, attention);
}

void LlamaBlock::bind(float* params, float* grads) {
  norm1_.bind(params, grads);
  norm2_.bind(params, grads);
  qkv_.bind(params + q_->offset, nullptr, grads + q_->offset, nullptr);
  o_proj_.bind(params + o_->offset, nullptr, grads + o_->offset, nullptr);
  if (moe_) moe_->bind(params, grads);
  if (has_mlp_) {
    gate_up_.bind(params + gate_->offset, nullptr, grads + gate_->offset, nullptr);
    down_.bind(params + down_w_->offset, nullptr, grads + down_w_->offset, nullptr);
  }
}

int LlamaBlock::rows(int b, int T) const {
  if (!sp_) return b * T;
  MT_CHECK(b * T % tp_.size == 0, "sequence parallelism needs b*T = ", b * T,
           " token rows divisible by tp ", tp_.size);
  return b * T / tp_.size;
}

// ---- forward / backward, each written once over the precision's ops ----------------------

template <class Ops>
void LlamaBlock::forward_with(const Ops& ops, float* s, const float* x_in, float* x_out, int b,
                              int T, const ResidualChain& chain) {
  const int N = b * T, Nl = rows(b, T);
  const size_t nc = size_t(Nl) * C_;
  float* qkv = s + off_.qkv;
  float* x_mid = s + off_.x_mid;
  auto* n1 = Ops::act(s, off_.n1);
  auto* att_out = Ops::act(s, off_.att_out);

  // Attention: n1 = rmsnorm(x_in); qkv = n1 [Wq; Wk; Wv]^T; the flash core (RoPE inside);
  // x_mid = x_in + o_proj(att).
  if (chain.pending)  // the block before's closing add, in the norm's row pass
    norm1_.add_forward(s, n1, chain.x_in, chain.pending, Nl);
  else
    norm1_.forward(s, n1, x_in, Nl);
  ops.forward(qkv_, qkv, n1, N, ops.gathered(), /*with_bias=*/false);
  const std::span<float> fscratch(forward_scratch_, forward_scratch_floats());
  flash_core_forward(ops, att_out, s + off_.lse, attention_args(qkv, b, T, s), context_.cp,
                     fscratch);
  ops.forward(o_proj_, x_mid, att_out, N);
  if (dropout_on()) branch_dropout(x_mid, x_mid, 1, Nl, false);

  // x_mid += x_in and n2 = rmsnorm(x_mid) in one pass over the rows. MLP: x_out = x_mid +
  // down(silu(gate n2) * up n2), or the routed experts plus the shared experts' SwiGLU (in the
  // reference's order: routed + shared).
  if (moe_) {
    float* n2 = s + off_.n2;  // fp32: the router reads it
    norm2_.add_forward(s, n2, x_mid, x_in, Nl);
    // The shared experts need none of the routed experts' exchanges: they run while those
    // travel (LocalWork), their up half under the first dispatch, down_proj under the last
    // combine (Megatron-LM's --moe-shared-expert-overlap).
    LocalWork shared;
    if (has_mlp_) {
      auto* n2_mlp = Ops::act(s, off_.n2_mlp);
      shared.first = [&, n2, n2_mlp] {
        ops.keep(n2_mlp, n2, nc);
        mlp_forward_up(ops, s, n2_mlp, N);
      };
      shared.last = [&] { ops.forward(down_, s + off_.shared, Ops::act(s, off_.h), N); };
    }
    moe_->forward(s, n2, x_out, N, shared);
    if (has_mlp_) add_inplace(x_out, s + off_.shared, nc);
  } else {
    auto* n2 = Ops::act(s, off_.n2);
    norm2_.add_forward(s, n2, x_mid, x_in, Nl);
    mlp_forward(ops, s, n2, x_out, N);
  }
  if (dropout_on()) branch_dropout(x_out, x_out, 2, Nl, false);
  if (!chain.leave_open) residual_add(x_out, x_mid, nc);  // profiled under norm, as GPT's
}

// y = down(silu(gate n2) * up n2), the dense MLP or the shared experts.
template <class Ops>
void LlamaBlock::mlp_forward(const Ops& ops, float* s, const typename Ops::Act* n2, float* y,
                             int N) {
  mlp_forward_up(ops, s, n2, N);
  ops.forward(down_, y, Ops::act(s, off_.h), N);
}

// The SwiGLU's input half: gu = n2 [gate; up]^T, h = silu(gate) * up (the slot's h).
template <class Ops>
void LlamaBlock::mlp_forward_up(const Ops& ops, float* s, const typename Ops::Act* n2, int N) {
  ops.forward(gate_up_, s + off_.gu, n2, N, ops.gathered(), /*with_bias=*/false);
  ops.swiglu(Ops::act(s, off_.h), s + off_.gu, N, Fl_);
}

// d_n2 from dx_out: through down_proj, SwiGLU and [gate; up] (or the routed experts, plus
// the shared experts' share).
template <class Ops>
void LlamaBlock::mlp_backward_input(const Ops& ops, float* s, const float* dx_out, float* scratch,
                                    int N, int Nl) {
  if (!moe_) return dense_backward_input(ops, s, dx_out, scratch, s + off_.d_n2, N);
  // The shared experts' input gradient while the routed experts' exchanges travel, as in
  // forward: through down_proj and the SwiGLU under the first dispatch, through [gate; up]
  // under the last combine.
  float* d_shared = s + off_.shared;  // the forward's output is dead by now
  LocalWork shared;
  if (has_mlp_) {
    shared.first = [&] { dense_backward_down(ops, s, dx_out, scratch, N); };
    shared.last = [&] { ops.backward_input(gate_up_, d_shared, Ops::act(s, off_.d_gu), N); };
  }
  moe_->backward_input(s, s + off_.n2, dx_out, s + off_.d_n2, N, shared);  // overwrites d_n2
  if (has_mlp_) add_inplace(s + off_.d_n2, d_shared, size_t(Nl) * C_);
}

// dn (Nl, C) = the SwiGLU MLP's input gradient (overwritten); keeps d_gu for W.
template <class Ops>
void LlamaBlock::dense_backward_input(const Ops& ops, float* s, const float* dx_out, float* scratch,
                                      float* dn, int N) {
  dense_backward_down(ops, s, dx_out, scratch, N);
  ops.backward_input(gate_up_, dn, Ops::act(s, off_.d_gu), N);
}

// The output half of the SwiGLU MLP's input gradient: d_gu (kept for W) from dx_out,
// through down_proj and the SwiGLU. scratch (fp32) or the bf16 stage holds the (N, Fl)
// gradient of h only inside the call.
template <class Ops>
void LlamaBlock::dense_backward_down(const Ops& ops, float* s, const float* dx_out, float* scratch,
                                     int N) {
  float* dh = bf16_ ? scratch_.stage : scratch;  // (N, Fl) fp32
  ops.backward_input(down_, dh, dx_out, N);
  ops.swiglu_backward(Ops::act(s, off_.d_gu), s + off_.gu, dh, N, Fl_);
}

// d_n1 from dx_mid: through o_proj, the flash core (recomputing the probabilities from lse)
// and [Wq; Wk; Wv]. scratch holds the flash workspace, then D, then (bf16) the fp32 output.
template <class Ops>
void LlamaBlock::attention_backward_input(const Ops& ops, float* s, float* scratch, int b, int T) {
  const int N = b * T;
  float* d_att_out = s + off_.d_att_out;
  auto* d_qkv = Ops::act(s, off_.d_qkv);
  ops.backward_input(o_proj_, d_att_out, attention_branch_grad(s), N);
  flash_core_backward(ops, d_qkv, d_att_out, Ops::act(s, off_.att_out), s + off_.lse,
                      attention_args(s + off_.qkv, b, T, s), context_.cp, scratch);
  ops.backward_input(qkv_, s + off_.d_n1, d_qkv, N);
}

void LlamaBlock::forward(float* s, const float* x_in, float* x_out, int b, int T) {
  with_precision_ops(bf16_, scratch_,
                     [&](const auto& ops) { forward_with(ops, s, x_in, x_out, b, T, {}); });
}

const float* LlamaBlock::forward_chained(float* s, float* x_in, const float* pending, float* x_out,
                                         bool leave_open, int b, int T) {
  const ResidualChain chain{pending ? x_in : nullptr, pending, leave_open};
  with_precision_ops(bf16_, scratch_,
                     [&](const auto& ops) { forward_with(ops, s, x_in, x_out, b, T, chain); });
  return leave_open ? s + off_.x_mid : nullptr;
}

void LlamaBlock::backward_input(float* s, const float* x_in, const float* dx_out, float* dx_in,
                                float* scratch, int b, int T) {
  const int N = b * T, Nl = rows(b, T);
  float* dx_mid = s + off_.dx_mid;
  // --dropout: the branches see their output gradients through their masks.
  if (dropout_) branch_dropout(s + off_.d_mlp_branch, dx_out, 2, Nl, true);
  with_precision_ops(bf16_, scratch_, [&](const auto& ops) {
    mlp_backward_input(ops, s, mlp_branch_grad(s, dx_out), scratch, N, Nl);
    // The residual path and the norm's gradient, in one pass.
    norm2_.backward_input_residual(s, dx_mid, dx_out, s + off_.d_n2, s + off_.x_mid, Nl);
    if (dropout_) branch_dropout(s + off_.d_attn_branch, dx_mid, 1, Nl, true);
    attention_backward_input(ops, s, scratch, b, T);
  });
  // dx_in must not alias anything read here; x_in's statistics are in the slot.
  norm1_.backward_input_residual(s, dx_in, dx_mid, s + off_.d_n1, x_in, Nl);
}

template <class Ops>
void LlamaBlock::backward_weight_with(const Ops& ops, float* s, const float* x_in,
                                      const float* dx_out, int b, int T) {
  const int N = b * T, Nl = rows(b, T);
  // Under sequence parallelism the linears gather again what the slot keeps only locally.
  if (moe_) moe_->backward_weight(s, s + off_.n2, N);
  if (has_mlp_) {
    ops.backward_weight(down_, mlp_branch_grad(s, dx_out), Ops::act(s, off_.h), N);
    ops.backward_weight(gate_up_, Ops::act(s, off_.d_gu), Ops::act(s, off_.n2_mlp), N);
  }
  norm2_.backward_weight(s, s + off_.d_n2, s + off_.x_mid, Nl);
  ops.backward_weight(o_proj_, attention_branch_grad(s), Ops::act(s, off_.att_out), N);
  ops.backward_weight(qkv_, Ops::act(s, off_.d_qkv), Ops::act(s, off_.n1), N);
  norm1_.backward_weight(s, s + off_.d_n1, x_in, Nl);
}

// A residual branch's output (which 1: attention, 2: MLP), or its gradient, through its mask
// (model/dropout_state.h): this rank's Nl rows of the residual stream.
void LlamaBlock::branch_dropout(float* y, const float* x, int which, int Nl, bool backward) const {
  dropout_->rows(y, x, DropoutState::block_site(layer_, which), Nl, C_, sp_ ? tp_.rank * Nl : 0,
                 backward);
}

void LlamaBlock::backward_weight(float* s, const float* x_in, const float* dx_out, int b, int T) {
  with_precision_ops(bf16_, scratch_,
                     [&](const auto& ops) { backward_weight_with(ops, s, x_in, dx_out, b, T); });
}

}  // namespace mt
