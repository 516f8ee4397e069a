// The llama block (--arch llama, docs/contracts.md section 9):
//   h     = x + o_proj(attention(rope(q_proj n1), rope(k_proj n1), v_proj n1)),  n1 = rmsnorm(x)
//   x_out = h + down_proj(silu(gate_proj n2) * up_proj n2),                      n2 = rmsnorm(h)
// (or, in an MoE layer, h + moe(n2) + shared(n2): the routed experts are SwiGLU MLPs
// (moe_layer.h), the shared experts one SwiGLU of width S * Fe, split over tp as the dense
// MLP; docs/moe.md).
//
// Fused GEMMs: q_proj, k_proj and v_proj are three tensors of the table placed one after the
// other (Placement::after_previous), so one column-parallel GEMM multiplies them as a
// ((Hl + 2 Hkvl) hd, C) matrix and each row of `qkv` is [q (Hl hd) | k (Hkvl hd) | v (Hkvl hd)];
// gate_proj and up_proj likewise give rows of [gate (Fl) | up (Fl)].
//
// Attention core: kernels/flash_attention.h. Grouped-query attention reads each kv head's K/V
// once for its H/Hkv query heads; RoPE rotates q and k as the kernel packs them, so the slot
// keeps the un-rotated GEMM output and no rotated copy exists in memory; the slot keeps the
// attention output and the log-sum-exp per row, never a (T, T) buffer. The backward recomputes
// the probabilities from them (which is what selective recomputation does for the gpt2 block:
// Recompute::selective changes nothing here). On one worker of this host the slot also keeps
// the kernel's packed (rotated) q and K (FlashAttention::packed, a bf16 or fp32 copy of q and
// k by the precision), so the backward does not pack them again.
//
// Context parallelism (--cp > 1): the block's T rows are this rank's zigzag shard of each
// sequence; only the attention core crosses the cp group (context_parallel_attention.h),
// everything else is per token.
//
// Tensor parallelism (Megatron, as the gpt2 block): q/k/v and gate/up column-parallel, o_proj
// and down_proj row-parallel; a rank holds Hl = H/t query heads and the Hkvl = Hkv/t kv heads
// they read (t divides Hkv: checked before any rank starts), and F/t of the MLP width. Sequence
// parallelism as the gpt2 block: the norms and residuals run on this rank's b*T/t rows.
//
// --dropout (context.dropout, while training): nanoGPT's and HF's places, as the gpt2 block:
// on the probabilities inside the flash core (drawn in its online-softmax loop and redrawn in
// its backward from the counters, never stored; kernels/flash_attention.h) and on both
// residual branches (o_proj's and the MLP's outputs, an MoE layer's routed + shared sum)
// before their residual adds; the chunk drops the embedding. The branches' masked output
// gradients are kept for the W pass.
//
// --precision bf16: the linears multiply bf16 weight copies; n1, n2, the attention output, the
// SwiGLU output and the column-parallel linears' output gradients (d_qkv, d_gu) are kept in
// bf16; the attention core multiplies bf16 operands with fp32 accumulation; qkv, gu, the
// residual stream, the norms' statistics, lse and the gradients the norms read stay fp32.
#pragma once

#include <memory>
#include <string>

#include "kernels/flash_attention.h"
#include "model/block.h"
#include "model/norm.h"
#include "model/precision_ops.h"
#include "tensor_parallel/column_parallel_linear.h"
#include "tensor_parallel/row_parallel_linear.h"

namespace mt {

class LlamaBlock final : public Block {
 public:
  LlamaBlock(int layer, const ModelConfig& cfg, const TensorParallelShard& tp, int max_b,
             ParamTable& table, SlotLayout& layout, const ExpertParallelShard& ep,
             const uint64_t* bf16_version, const BlockContext& context);

  void bind(float* params, float* grads) override;
  void set_bf16_scratch(float* stage, bf16* g16) override;
  size_t bf16_stage_floats() const override;
  size_t bf16_gather_values() const override;
  size_t bf16_weight_bytes() const override;
  size_t linear_scratch_bytes() const override;
  void bf16_copies(std::vector<Bf16CopyTarget>& out) const override;
  void set_scratch(float* scratch) override { scratch_.scratch = scratch; }
  size_t forward_scratch_floats() const override;
  void set_forward_scratch(float* scratch) override { forward_scratch_ = scratch; }

  void forward(float* slot, const float* x_in, float* x_out, int b, int T) override;
  const float* forward_chained(float* slot, float* x_in, const float* pending, float* x_out,
                               bool leave_open, int b, int T) override;
  void backward_input(float* slot, const float* x_in, const float* dx_out, float* dx_in,
                      float* scratch, int b, int T) override;
  void backward_weight(float* slot, const float* x_in, const float* dx_out, int b, int T) override;
  size_t attention_scratch_floats() const override;
  size_t own_workspace_floats() const override { return moe_ ? moe_->own_workspace_floats() : 0; }
  MoeLayer* moe() override { return moe_.get(); }

 private:
  int rows(int b, int T) const;  // token rows of the residual stream on this rank
  int q_cols() const { return Hl_ * hd_; }
  int qkv_cols() const { return (Hl_ + 2 * Hkvl_) * hd_; }
  static std::string layer_prefix(int layer);  // "model.layers.{i}."
  void register_params(int layer, const ModelConfig& cfg, bool moe, ParamTable& table);
  void register_mlp(const std::string& prefix, const ModelConfig& cfg, ParamTable& table);
  void reserve_buffers(SlotLayout& layout, bool moe);
  // The flash kernel's operands for this microbatch's qkv (b sequences of T rows); with the
  // microbatch's slot s, its kept packing too (where the block keeps one).
  FlashAttention attention_args(const float* qkv, int b, int T, float* s = nullptr) const;

  template <class Ops>
  void forward_with(const Ops& ops, float* s, const float* x_in, float* x_out, int b, int T,
                    const ResidualChain& chain);
  template <class Ops>
  void mlp_forward(const Ops& ops, float* s, const typename Ops::Act* n2, float* y, int N);
  template <class Ops>
  void mlp_forward_up(const Ops& ops, float* s, const typename Ops::Act* n2, int N);
  template <class Ops>
  void mlp_backward_input(const Ops& ops, float* s, const float* dx_out, float* scratch, int N,
                          int Nl);
  template <class Ops>
  void dense_backward_input(const Ops& ops, float* s, const float* dx_out, float* scratch,
                            float* dn, int N);
  template <class Ops>
  void dense_backward_down(const Ops& ops, float* s, const float* dx_out, float* scratch, int N);
  template <class Ops>
  void attention_backward_input(const Ops& ops, float* s, float* scratch, int b, int T);
  // --dropout: the chunk's state (null or p = 0: none).
  bool dropout_on() const { return dropout_ && dropout_->on(); }
  void branch_dropout(float* y, const float* x, int which, int Nl, bool backward) const;
  // The branches' output gradients as their layers see them: through the masks (--dropout).
  float* attention_branch_grad(float* s) const {
    return s + (dropout_ ? off_.d_attn_branch : off_.dx_mid);
  }
  const float* mlp_branch_grad(float* s, const float* dx_out) const {
    return dropout_ ? s + off_.d_mlp_branch : dx_out;
  }
  template <class Ops>
  void backward_weight_with(const Ops& ops, float* s, const float* x_in, const float* dx_out, int b,
                            int T);

  int C_, T_, max_b_, layer_, Hl_, Hkvl_, hd_, Fl_;
  TensorParallelShard tp_;
  bool sp_ = false, bf16_ = false;
  bool has_mlp_ = false;  // the dense MLP, or an MoE layer's shared experts (gate_up_, down_)
  BlockContext context_;
  const DropoutState* dropout_ = nullptr;
  LayerScratch scratch_;
  float* forward_scratch_ = nullptr;
  Norm norm1_, norm2_;
  const ParamInfo *q_ = nullptr, *o_ = nullptr, *gate_ = nullptr, *down_w_ = nullptr;
  tp::ColumnParallelLinear qkv_, gate_up_;
  tp::RowParallelLinear o_proj_, down_;
  std::unique_ptr<MoeLayer> moe_;
  // Slot offsets. N = b*T rows, Nl = N or N/t under sequence parallelism. Act buffers (bf16
  // under --precision bf16): n1, att_out, n2 (dense), n2_mlp, h, d_gu, d_qkv. Fl: the dense
  // MLP's or the shared experts' width on this rank.
  struct {
    size_t n1, qkv, att_out, lse;  // (Nl,C) (N,qkv_cols) (N,Hl hd) (b,Hl,T)
    size_t packed;                 // the flash forward's packed q and K, or SIZE_MAX (none)
    size_t x_mid, n2, gu, h;       // (Nl,C) (Nl,C) (N,2Fl) (N,Fl)
    size_t n2_mlp, shared;         // MoE: the shared experts' operand (Nl,C), their output (Nl,C)
    // gradients kept for the W pass
    size_t d_gu, d_n2, dx_mid, d_att_out, d_qkv, d_n1;  // (N,2Fl) (Nl,C) (Nl,C) (N,Hl hd)...
    size_t d_attn_branch, d_mlp_branch;                 // --dropout: through the masks (Nl,C) each
  } off_{};
};

}  // namespace mt
