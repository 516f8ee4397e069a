#include "model/gpt_block.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/layernorm.h"
#include "model/flash_core.h"
#include "model/precision_ops.h"

namespace mt {

namespace {

ShardSpec rows_of(int64_t start, int64_t len) {
  return {0, {{start, len}}};
}

}  // namespace

GptBlock::GptBlock(int layer, const ModelConfig& cfg, const TensorParallelShard& tp, int max_b,
                   ParamTable& table, SlotLayout& layout, const ExpertParallelShard& ep,
                   Recompute recompute, const uint64_t* bf16_version, const BlockContext& context)
    : C_(cfg.dim),
      max_b_(max_b),
      layer_(layer),
      dropout_(context.dropout && context.dropout->p > 0 ? context.dropout : nullptr),
      tp_(tp),
      sp_(tp.splits_sequence()),
      gpu_kernels_(context.kernels == KernelTarget::gpu),
      flash_(context.cp || dropout_ || gpu_kernels_),
      recompute_attention_(recompute == Recompute::selective && !flash_),
      bf16_(bf16_version != nullptr),
      context_(context) {
  // The user-facing rule (--tp divides --heads) is checked with the options before any
  // rank starts; here it is an invariant.
  MT_CHECK(cfg.heads % tp.size == 0, "tp ", tp.size, " does not divide heads ", cfg.heads);
  T_ = cfg.seq;
  NHl_ = cfg.heads / tp.size;
  Cl_ = NHl_ * cfg.head_dim();
  Hl_ = cfg.hidden() / tp.size;
  kernel_ = counted_attention_kernel(context.kernels, context.profile, bf16_, Cl_, NHl_);
  saved_ = attention_saved_form_of(kernel_);
  keep_dx_mid16_ = bf16_ && !sp_ && !dropout_;
  // Selective recomputation drops the (b, NH, T, T) probabilities. Where the kernel keeps row
  // statistics instead (2 floats a row) there is nothing of that size to drop, so the block
  // keeps them and does not rerun the attention core; only the AVX512-BF16 tiles' packed q
  // and k are dropped (their backward packs them again, the same bits).
  if (recompute_attention_ && saved_ != AttentionSaved::probabilities) {
    recompute_attention_ = false;
    saved_ = AttentionSaved::row_stats;
  }
  const bool moe = is_moe_layer(cfg, layer);
  register_params(layer, cfg, moe, table);
  // Under tp the layer splits the tokens, not the experts (moe_layer.h).
  if (moe) moe_ = std::make_unique<MoeLayer>(layer, cfg, ep, max_b * cfg.seq, table, layout, tp);
  qkv_ = tp::ColumnParallelLinear(tp, C_, 3 * Cl_);
  attn_proj_ = tp::RowParallelLinear(tp, Cl_, C_);
  fc_ = tp::ColumnParallelLinear(tp, C_, Hl_);
  mlp_proj_ = tp::RowParallelLinear(tp, Hl_, C_);
  if (bf16_) {
    qkv_.enable_bf16(bf16_version);
    attn_proj_.enable_bf16(bf16_version);
    if (!moe) {  // an MoE block's MLP is its experts, with bf16 copies of their own (moe_layer.h)
      fc_.enable_bf16(bf16_version);
      mlp_proj_.enable_bf16(bf16_version);
    }
  }
  reserve_buffers(layout, moe);
}

// In the order of the file format (docs/contracts.md §4); an MoE block's MoeLayer registers its
// router and experts after ln_2, where the dense MLP would be.
void GptBlock::register_params(int layer, const ModelConfig& cfg, bool moe, ParamTable& table) {
  const int64_t C = C_, H = cfg.hidden(), r = tp_.rank;
  const bool split = tp_.size > 1;
  const std::string p = "transformer.h." + std::to_string(layer) + ".";
  const float proj_std = 0.02f / std::sqrt(2.0f * cfg.layers);
  // Column-parallel QKV: this rank's heads are rows [r*Cl, (r+1)*Cl) of each of q, k, v.
  const ShardSpec qkv_rows =
      split ? ShardSpec{0, {{r * Cl_, Cl_}, {C + r * Cl_, Cl_}, {2 * C + r * Cl_, Cl_}}}
            : ShardSpec{};
  const ShardSpec attn_cols = split ? ShardSpec{1, {{r * Cl_, Cl_}}} : ShardSpec{};
  const ShardSpec fc_rows = split ? rows_of(r * Hl_, Hl_) : ShardSpec{};
  const ShardSpec mlp_cols = split ? ShardSpec{1, {{r * Hl_, Hl_}}} : ShardSpec{};

  // Under sequence parallelism a LayerNorm sees only this rank's rows: partial gradients.
  auto norm_param = [&](const std::string& name, InitKind init) {
    ParamInfo& info = table.add(p + name, {C}, init);
    info.tp_partial_grad = sp_;
    return &info;
  };
  ln1_.w_info = norm_param("ln_1.weight", InitKind::ones);
  ln1_.b_info = norm_param("ln_1.bias", InitKind::zeros);
  qkv_p_.w = &table.add(p + "attn.c_attn.weight", {3 * C, C}, InitKind::normal, 0.02f, qkv_rows);
  qkv_p_.b = &table.add(p + "attn.c_attn.bias", {3 * C}, InitKind::zeros, 0, qkv_rows);
  attn_proj_p_.w =
      &table.add(p + "attn.c_proj.weight", {C, C}, InitKind::normal, proj_std, attn_cols);
  attn_proj_p_.b = &table.add(p + "attn.c_proj.bias", {C}, InitKind::zeros);
  ln2_.w_info = norm_param("ln_2.weight", InitKind::ones);
  ln2_.b_info = norm_param("ln_2.bias", InitKind::zeros);
  if (moe) return;
  fc_p_.w = &table.add(p + "mlp.c_fc.weight", {H, C}, InitKind::normal, 0.02f, fc_rows);
  fc_p_.b = &table.add(p + "mlp.c_fc.bias", {H}, InitKind::zeros, 0, fc_rows);
  mlp_proj_p_.w = &table.add(p + "mlp.c_proj.weight", {C, H}, InitKind::normal, proj_std, mlp_cols);
  mlp_proj_p_.b = &table.add(p + "mlp.c_proj.bias", {C}, InitKind::zeros);
}

// Buffers only a GEMM reads are bf16 under --precision bf16 (block.h).
void GptBlock::reserve_buffers(SlotLayout& layout, bool moe) {
  auto gemm_only = [&](size_t count) { return reserve_gemm_operand(layout, count, bf16_); };
  const size_t N = size_t(max_b_) * T_, Nl = sp_ ? N / tp_.size : N;
  off_.ln1_out = gemm_only(Nl * C_);
  off_.ln1_mean = layout.reserve(Nl);
  off_.ln1_rstd = layout.reserve(Nl);
  off_.qkv = layout.reserve(N * 3 * Cl_);
  if (flash_)
    off_.lse = layout.reserve(size_t(max_b_) * NHl_ * T_);
  else if (!recompute_attention_)
    off_.att = layout.reserve(attention_saved_floats(saved_, max_b_, T_, Cl_, NHl_));
  off_.att_out = gemm_only(N * Cl_);
  off_.x_mid = layout.reserve(Nl * C_);
  off_.ln2_out = moe ? layout.reserve(Nl * C_) : gemm_only(Nl * C_);  // the router reads fp32
  off_.ln2_mean = layout.reserve(Nl);
  off_.ln2_rstd = layout.reserve(Nl);
  const size_t nh = moe ? 0 : N * Hl_;  // the experts keep their own buffers
  off_.fc_pre = layout.reserve(nh);
  off_.fc_out = gemm_only(nh);
  off_.d_fc = gemm_only(nh);
  off_.d_ln2 = layout.reserve(Nl * C_);
  off_.dx_mid = layout.reserve(Nl * C_);
  off_.d_att_out = layout.reserve(N * Cl_);
  off_.d_qkv = gemm_only(N * 3 * Cl_);
  off_.d_ln1 = layout.reserve(Nl * C_);
  if (dropout_) {
    off_.d_attn_branch = layout.reserve(Nl * C_);
    off_.d_mlp_branch = layout.reserve(Nl * C_);
  }
  if (keep_dx_mid16_) off_.dx_mid16 = layout.reserve_bf16(Nl * C_);
}

size_t GptBlock::bf16_stage_floats() const {
  // fp32 results before rounding: LayerNorm outputs (Nl, C), the attention output (N, Cl),
  // the GELU output and its gradient (N, Hl), the attention's input gradient (N, 3Cl); and
  // the experts' chunks.
  if (!bf16_) return 0;
  const size_t N = size_t(max_b_) * T_;
  const size_t own = N * std::max({size_t(C_), size_t(3 * Cl_), size_t(Hl_)});
  return moe_ ? std::max(own, moe_->bf16_stage_floats()) : own;
}

void GptBlock::set_bf16_scratch(float* stage, bf16* g16) {
  scratch_.stage = stage, scratch_.gather = g16;
  // The block's own uses of the stage end before it calls its MoE layer.
  if (moe_) moe_->set_bf16_stage(stage);
}

size_t GptBlock::bf16_gather_values() const {
  // Gathered inputs of the column-parallel linears (N, C) and the row-parallel linears'
  // rounded output gradients (N, C).
  return bf16_ ? size_t(max_b_) * T_ * C_ : 0;
}

size_t GptBlock::linear_scratch_bytes() const {
  // Every linear's weight gradient runs on all b T rows of a microbatch (gathered under
  // sequence parallelism); an MoE block's dense MLP is not built.
  const int N = max_b_ * T_;
  const bool any = context_.kernels == KernelTarget::profile;  // model/kernel_target.h
  size_t bytes = std::max(qkv_.weight_grad_scratch_bytes(N, any),
                          attn_proj_.weight_grad_scratch_bytes(N, any));
  if (!moe_)
    bytes = std::max({bytes, fc_.weight_grad_scratch_bytes(N, any),
                      mlp_proj_.weight_grad_scratch_bytes(N, any)});
  return bytes;
}

size_t GptBlock::bf16_weight_bytes() const {
  return qkv_.bf16_weight_bytes() + attn_proj_.bf16_weight_bytes() + fc_.bf16_weight_bytes() +
         mlp_proj_.bf16_weight_bytes() + (moe_ ? moe_->bf16_weight_bytes() : 0);
}

void GptBlock::bf16_copies(std::vector<Bf16CopyTarget>& out) const {
  for (const auto* l : {&qkv_, &fc_}) l->bf16_copies(out);
  for (const auto* l : {&attn_proj_, &mlp_proj_}) l->bf16_copies(out);
}

void GptBlock::bind(float* params, float* grads) {
  for (Norm* n : {&ln1_, &ln2_}) {
    n->w = params + n->w_info->offset;
    n->b = params + n->b_info->offset;
    n->dw = grads + n->w_info->offset;
    n->db = grads + n->b_info->offset;
  }
  auto bind_linear = [&](auto& layer, const LinearParams& p) {
    layer.bind(params + p.w->offset, params + p.b->offset, grads + p.w->offset,
               grads + p.b->offset);
  };
  bind_linear(qkv_, qkv_p_);
  bind_linear(attn_proj_, attn_proj_p_);
  if (moe_) {
    moe_->bind(params, grads);
  } else {
    bind_linear(fc_, fc_p_);
    bind_linear(mlp_proj_, mlp_proj_p_);
  }
}

size_t GptBlock::attention_scratch_floats() const {
  // A GPU's fused backward: the rows' D only, its tiles on chip (model/kernel_target.h).
  if (gpu_kernels_) return size_t(max_b_) * NHl_ * T_;
  if (flash_)
    return counted_flash_core_backward_scratch_floats(context_.kernels, context_.profile,
                                                      flash_args(nullptr, max_b_, T_));
  return attention_backward_scratch_floats_of(kernel_, max_b_, T_, NHl_);
}

size_t GptBlock::attention_thread_scratch_bytes() const {
  return flash_ ? 0 : attention_thread_scratch_bytes_for(kernel_, T_, Cl_, NHl_);
}

size_t GptBlock::forward_scratch_floats() const {
  if (gpu_kernels_) return 0;  // a GPU's fused forward keeps its tiles on chip
  if (flash_)
    return counted_flash_forward_scratch_floats(context_.kernels, context_.profile,
                                                flash_args(nullptr, max_b_, T_));
  return recompute_attention_ ? attention_saved_floats(saved_, max_b_, T_, Cl_, NHl_) : 0;
}

// q, k, v of head h at columns h hd of each third of a qkv row; no RoPE (§1).
FlashAttention GptBlock::flash_args(const float* qkv, int b, int T) const {
  FlashAttention a;
  a.B = b, a.Tq = a.Tk = T;
  a.H = a.Hkv = NHl_, a.hd = Cl_ / NHl_;
  a.q = qkv;
  a.k = qkv + Cl_;
  a.v = qkv + 2 * Cl_;
  a.ldq = a.ldk = a.ldv = size_t(3 * Cl_);
  a.qpos = a.kpos = context_.positions;
  a.precision = bf16_ ? FlashPrecision::bf16 : FlashPrecision::fp32;
  if (dropout_) a.dropout = dropout_->attention(layer_, tp_.rank * NHl_);
  return a;
}

int GptBlock::rows(int b, int T) const {
  if (!sp_) return b * T;
  MT_CHECK(b * T % tp_.size == 0, "sequence parallelism needs b*T = ", b * T,
           " token rows divisible by tp ", tp_.size);
  return b * T / tp_.size;
}

// ---- forward / backward ------------------------------------------------------------------
// One body per pass over the precision's ops (precision_ops.h): under bf16 each fp32 result
// that only a GEMM reads is rounded into its bf16 slot buffer once, where B and W both find
// it; the attention core multiplies in bf16 too (kernels/attention.h), and the
// recomputation under selective calls the same bf16 forward, so its probabilities are the
// forward's bit for bit.

void GptBlock::forward(float* s, const float* x_in, float* x_out, int b, int T) {
  with_precision_ops(bf16_, scratch_,
                     [&](const auto& ops) { forward_with(ops, s, x_in, x_out, b, T, {}); });
}

const float* GptBlock::forward_chained(float* s, float* x_in, const float* pending, float* x_out,
                                       bool leave_open, int b, int T) {
  const ResidualChain chain{pending ? x_in : nullptr, pending, leave_open};
  with_precision_ops(bf16_, scratch_,
                     [&](const auto& ops) { forward_with(ops, s, x_in, x_out, b, T, chain); });
  return leave_open ? s + off_.x_mid : nullptr;
}

void GptBlock::backward_input(float* s, const float* x_in, const float* dx_out, float* dx_in,
                              float* scratch, int b, int T) {
  with_precision_ops(bf16_, scratch_, [&](const auto& ops) {
    backward_input_with(ops, s, x_in, dx_out, dx_in, scratch, b, T);
  });
}

void GptBlock::backward_weight(float* s, const float* x_in, const float* dx_out, int b, int T) {
  with_precision_ops(bf16_, scratch_,
                     [&](const auto& ops) { backward_weight_with(ops, s, x_in, dx_out, b, T); });
}

template <class Ops>
void GptBlock::forward_with(const Ops& p, float* s, const float* x_in, float* x_out, int b, int T,
                            const ResidualChain& chain) {
  using Act = typename Ops::Act;
  const int N = b * T, Nl = rows(b, T);
  const size_t nc = size_t(Nl) * C_;  // one residual-stream buffer on this rank
  Act* ln1_out = Ops::act(s, off_.ln1_out);
  Act* att_out = Ops::act(s, off_.att_out);
  float* qkv = s + off_.qkv;
  float* x_mid = s + off_.x_mid;
  float* att = recompute_attention_ ? probs_scratch_ : s + off_.att;

  if (chain.pending)  // the block before's closing add, in ln_1's row pass
    p.add_layernorm(ln1_out, s + off_.ln1_mean, s + off_.ln1_rstd, chain.x_in, chain.pending,
                    ln1_.w, ln1_.b, Nl, C_);
  else
    p.layernorm(ln1_out, s + off_.ln1_mean, s + off_.ln1_rstd, x_in, ln1_.w, ln1_.b, Nl, C_);
  p.forward(qkv_, qkv, ln1_out, N, p.gathered());
  if (flash_)
    flash_core_forward(p, att_out, s + off_.lse, flash_args(qkv, b, T), context_.cp,
                       std::span<float>(probs_scratch_, forward_scratch_floats()));
  else
    p.attention(att_out, att, qkv, b, T, Cl_, NHl_, saved_);
  p.forward(attn_proj_, x_mid, att_out, N);
  if (dropout_on()) branch_dropout(x_mid, x_mid, 1, b, T, false);

  // x_mid = x_in + attn(...) and ln_2 of it, in one pass over the rows.
  if (moe_) {  // the router reads an fp32 ln2_out; the experts keep their own rows
    float* ln2_out = s + off_.ln2_out;
    add_layernorm_forward(ln2_out, s + off_.ln2_mean, s + off_.ln2_rstd, x_mid, x_in, ln2_.w,
                          ln2_.b, Nl, C_);
    moe_->forward(s, ln2_out, x_out, N);  // this rank's Nl rows of N
  } else {
    Act* ln2_out = Ops::act(s, off_.ln2_out);
    Act* fc_out = Ops::act(s, off_.fc_out);
    float* fc_pre = s + off_.fc_pre;
    p.add_layernorm(ln2_out, s + off_.ln2_mean, s + off_.ln2_rstd, x_mid, x_in, ln2_.w, ln2_.b, Nl,
                    C_);
    p.forward_gelu(fc_, fc_pre, fc_out, ln2_out, N, p.gathered());
    p.forward(mlp_proj_, x_out, fc_out, N);
  }
  if (dropout_on()) branch_dropout(x_out, x_out, 2, b, T, false);
  if (!chain.leave_open) residual_add(x_out, x_mid, nc);
}

// A residual branch's output (which 1: attention, 2: MLP), or its gradient, through its mask:
// this rank's rows of the residual stream (under sequence parallelism its b*T/t rows).
void GptBlock::branch_dropout(float* y, const float* x, int which, int b, int T,
                              bool backward) const {
  const int Nl = rows(b, T);
  dropout_->rows(y, x, DropoutState::block_site(layer_, which), Nl, C_, sp_ ? tp_.rank * Nl : 0,
                 backward);
}

template <class Ops>
void GptBlock::backward_input_with(const Ops& p, float* s, const float* x_in, const float* dx_out,
                                   float* dx_in, float* scratch, int b, int T) {
  using Act = typename Ops::Act;
  const int N = b * T, Nl = rows(b, T);
  float* d_ln2 = s + off_.d_ln2;
  float* dx_mid = s + off_.dx_mid;
  float* d_att_out = s + off_.d_att_out;
  Act* d_qkv = Ops::act(s, off_.d_qkv);
  float* d_ln1 = s + off_.d_ln1;

  // --dropout: the branches see their output gradients through their masks.
  const float* d_mlp = dropout_ ? s + off_.d_mlp_branch : dx_out;
  if (dropout_) branch_dropout(s + off_.d_mlp_branch, dx_out, 2, b, T, true);
  if (moe_) {
    moe_->backward_input(s, s + off_.ln2_out, d_mlp, d_ln2, N);  // overwrites d_ln2
  } else {
    // MLP: d_fc = gelu'(fc_pre) * (dx_out @ W_proj), then back through c_fc to ln_2's output.
    Act* d_fc = Ops::act(s, off_.d_fc);
    p.backward_input_dgelu(mlp_proj_, d_fc, s + off_.fc_pre, d_mlp, N);
    p.backward_input(fc_, d_ln2, d_fc, N);
  }
  // Back through `x + mlp(ln_2(x))`: the residual path's gradient and ln_2's input gradient in
  // one pass over the rows, (Nl, C) each; with keep_dx_mid16_ also dx_mid's bf16 rounding.
  if (keep_dx_mid16_)
    layernorm_backward_input_residual_bf16(dx_mid, dx_mid16(s), dx_out, d_ln2, s + off_.x_mid,
                                           ln2_.w, s + off_.ln2_mean, s + off_.ln2_rstd, Nl, C_);
  else
    layernorm_backward_input_residual(dx_mid, dx_out, d_ln2, s + off_.x_mid, ln2_.w,
                                      s + off_.ln2_mean, s + off_.ln2_rstd, Nl, C_);

  // Attention. Selective recomputation: the probabilities again, from the kept qkv. The
  // recomputed output (equal to the kept att_out) lands in d_att_out, overwritten next.
  float* att = s + off_.att;
  if (recompute_attention_) {
    att = probs_scratch_;
    p.attention(d_att_out, att, s + off_.qkv, b, T, Cl_, NHl_, saved_);
  }
  const float* d_attn = dropout_ ? s + off_.d_attn_branch : dx_mid;
  if (dropout_) branch_dropout(s + off_.d_attn_branch, dx_mid, 1, b, T, true);
  if constexpr (std::is_same_v<Act, bf16>) {
    if (keep_dx_mid16_)
      p.backward_input_rounded(attn_proj_, d_att_out, dx_mid16(s), N);
    else
      p.backward_input(attn_proj_, d_att_out, d_attn, N);
  } else {
    p.backward_input(attn_proj_, d_att_out, d_attn, N);
  }
  if (flash_)
    flash_core_backward(p, d_qkv, d_att_out, Ops::act(s, off_.att_out), s + off_.lse,
                        flash_args(s + off_.qkv, b, T), context_.cp, scratch);
  else
    p.attention_backward(d_qkv, scratch, d_att_out, s + off_.qkv, att, b, T, Cl_, NHl_, saved_);
  p.backward_input(qkv_, d_ln1, d_qkv, N);
  // dx_in must not alias anything read below; the x_in statistics are in the slot.
  layernorm_backward_input_residual(dx_in, dx_mid, d_ln1, x_in, ln1_.w, s + off_.ln1_mean,
                                    s + off_.ln1_rstd, Nl, C_);
}

template <class Ops>
void GptBlock::backward_weight_with(const Ops& p, float* s, const float* x_in, const float* dx_out,
                                    int b, int T) {
  const int N = b * T, Nl = rows(b, T);
  // Under sequence parallelism the linears gather again what the slot keeps only locally. The
  // row-parallel biases see the whole gradient: identical on every rank.
  if (moe_) {
    moe_->backward_weight(s, s + off_.ln2_out, N);
  } else {
    p.backward_weight(mlp_proj_, dropout_ ? s + off_.d_mlp_branch : dx_out,
                      Ops::act(s, off_.fc_out), N);
    p.backward_weight(fc_, Ops::act(s, off_.d_fc), Ops::act(s, off_.ln2_out), N);
  }
  layernorm_backward_weight(ln2_.dw, ln2_.db, s + off_.d_ln2, s + off_.x_mid, s + off_.ln2_mean,
                            s + off_.ln2_rstd, Nl, C_);
  const float* d_attn = s + (dropout_ ? off_.d_attn_branch : off_.dx_mid);
  if constexpr (std::is_same_v<typename Ops::Act, bf16>) {
    if (keep_dx_mid16_)
      p.backward_weight_rounded(attn_proj_, dx_mid16(s), Ops::act(s, off_.att_out), N);
    else
      p.backward_weight(attn_proj_, d_attn, Ops::act(s, off_.att_out), N);
  } else {
    p.backward_weight(attn_proj_, d_attn, Ops::act(s, off_.att_out), N);
  }
  p.backward_weight(qkv_, Ops::act(s, off_.d_qkv), Ops::act(s, off_.ln1_out), N);
  layernorm_backward_weight(ln1_.dw, ln1_.db, s + off_.d_ln1, x_in, s + off_.ln1_mean,
                            s + off_.ln1_rstd, Nl, C_);
}

}  // namespace mt
