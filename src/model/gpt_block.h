// The gpt2 block (--arch gpt2): one pre-LayerNorm transformer block (docs/contracts.md §1):
//   x_mid = x_in + c_proj(attention(c_attn(ln_1(x_in))))
//   x_out = x_mid + mlp.c_proj(gelu(mlp.c_fc(ln_2(x_mid))))
//
// Tensor parallelism (Megatron): c_attn and mlp.c_fc are column-parallel layers (split by
// output columns; each rank owns whole heads), attn.c_proj and mlp.c_proj row-parallel ones
// (split by input rows): tensor_parallel/{column,row}_parallel_linear.h, which
// hold the communication. Per sub-block one all-reduce in forward (after the row-parallel
// matmul, before its bias, so the bias counts once) and one in backward (of the LayerNorm
// output gradient). With tp = 1 both are skipped.
//
// Sequence parallelism replaces them by an all-gather before the column-parallel matmul and
// a reduce-scatter after the row-parallel one: LayerNorms, residuals and biases run on this
// rank's b*T/t token rows. Like Megatron, only the local rows of the LayerNorm outputs are
// kept: the W pass gathers them again, and gathers the output gradients again too (they
// are kept local, not gathered), so no (b*T, C) buffer of the replicated width lives in the
// slot. The LayerNorm weight gradients are then partial sums over tp
// (ParamInfo::tp_partial_grad); the trainer sums them once per step.
//
// Backward is split: backward_input (B) produces dx_in and keeps the intermediate
// gradients in the slot; backward_weight (W) turns them into weight gradients later.
//
// What the attention core keeps for its backward (`att`) is the probabilities (b, NHl, T, T),
// or, where the kernel recomputes them (kernels/attention.h, AttentionSaved::row_stats: the
// register-tile kernels, fp32 and AVX512-BF16), each row's maximum and 1 / sum (b, NHl, T, 2),
// and on the AVX512-BF16 tiles the forward's packed q and k (row_stats_packed).
// With Recompute::selective the probabilities are not in the slot: forward writes them to
// chunk-wide scratch and B recomputes them there from the kept qkv (the same kernel on the
// same input: bitwise the same); row statistics stay in the slot (since stop 47: nothing is
// rerun, only the packed q and k are dropped). W never reads them. Full
// recomputation is the chunk's business (model_chunk.h): the block is unchanged, its
// "slot" is then scratch.
//
// Context parallelism (context.cp non-null, --cp > 1): the block's T rows are this rank's
// zigzag shard of each sequence. Its keys live on every rank of the cp group, so no (T, T)
// probabilities exist: the attention core is the flash kernel across the group
// (flash_core.h, the llama block's path, without RoPE: the learned positions were added by
// the embedding at the true positions), and the slot keeps the log-sum-exp (b, NHl, T)
// instead of the probabilities; Recompute::selective then changes nothing.
//
// --dropout: the attention core is the flash kernel as under cp (whatever the layout and
// precision), which draws the probabilities' mask inside its online softmax and redraws it in
// the backward (kernels/flash_attention.h): the slot keeps lse, never a (T, T) buffer, and
// Recompute::selective changes nothing. Both residual branches go through their masks before
// the residual add; their masked output gradients are kept for the W pass.
//
// --precision bf16 (bf16_version non-null; docs/precision.md): the four linears multiply
// bf16 copies of their weights (refreshed when *bf16_version moves). What the slot keeps
// only for a GEMM is kept in bf16 instead of fp32: ln1_out, att_out, ln2_out and fc_out
// (the W pass's inputs) and d_qkv, d_fc (the B and W passes' output gradients). The
// residual stream, LayerNorm statistics, qkv and the probabilities (the attention core
// multiplies bf16-rounded operands but keeps scores and softmax in fp32), fc_pre (GELU's
// input) and the gradients the LayerNorms read stay fp32. An MoE block keeps ln2_out in
// fp32: the router reads it (the experts keep their own bf16 rows, moe_layer.h).
#pragma once

#include <memory>

#include "model/activation_pool.h"
#include "model/block.h"
#include "model/config.h"
#include "model/moe_layer.h"
#include "model/param_table.h"
#include "model/precision_ops.h"
#include "model/recompute.h"
#include "tensor_parallel/column_parallel_linear.h"
#include "tensor_parallel/row_parallel_linear.h"
#include "tensor_parallel/tensor_parallel_shard.h"

namespace mt {

class GptBlock final : public Block {
 public:
  // Registers the block's parameters in `table` (sharded over tp) and reserves its
  // activation buffers in `layout` for microbatches of up to max_b sequences.
  // A block whose MLP is a mixture of experts (is_moe_layer) holds a MoeLayer instead of
  // mlp.c_fc/c_proj; ep says which experts this rank owns (docs/moe.md).
  // recompute: only Recompute::selective changes the block (full is handled by the chunk).
  GptBlock(int layer, const ModelConfig& cfg, const TensorParallelShard& tp, int max_b,
           ParamTable& table, SlotLayout& layout, const ExpertParallelShard& ep = {},
           Recompute recompute = Recompute::none, const uint64_t* bf16_version = nullptr,
           const BlockContext& context = {});

  void bind(float* params, float* grads) override;
  // --precision bf16: stage (bf16_stage_floats() fp32) receives fp32 results before they are
  // rounded into the slot; g16 (bf16_gather_values() bf16) holds gathered or rounded GEMM
  // operands during one call. Both shared by every block (and the head) of a chunk, and the
  // stage by the block's MoE layer. The weight bytes count the experts' copies too.
  void set_bf16_scratch(float* stage, bf16* g16) override;
  size_t bf16_stage_floats() const override;
  size_t bf16_gather_values() const override;
  size_t bf16_weight_bytes() const override;
  size_t linear_scratch_bytes() const override;
  void bf16_copies(std::vector<Bf16CopyTarget>& out) const override;
  // (max_b*T, C) floats the block may use during any of its calls (sequence parallelism:
  // gathered inputs and partial outputs); shared by every block of a chunk.
  void set_scratch(float* scratch) override { scratch_.scratch = scratch; }
  // Selective recomputation: floats of the (max_b, NHl, T, T) probabilities buffer the
  // block needs outside the slot (0 otherwise), and that buffer (shared by the chunk's
  // blocks: forward and B of one block at a time).
  size_t forward_scratch_floats() const override;
  void set_forward_scratch(float* probs) override { probs_scratch_ = probs; }

  // x_out (b, T, C) = block(x_in (b, T, C)); x_in must stay untouched until backward_weight.
  // Under sequence parallelism x_in, x_out, dx_in and dx_out hold this rank's b*T/t rows.
  void forward(float* slot, const float* x_in, float* x_out, int b, int T) override;
  const float* forward_chained(float* slot, float* x_in, const float* pending, float* x_out,
                               bool leave_open, int b, int T) override;
  // dx_in (b, T, C) = gradient w.r.t. x_in, from dx_out (b, T, C). Overwrites dx_in.
  // scratch: attention backward scratch of attention_scratch_floats() floats.
  void backward_input(float* slot, const float* x_in, const float* dx_out, float* dx_in,
                      float* scratch, int b, int T) override;
  // Weight gradients (+=) from the gradients backward_input kept in the slot.
  void backward_weight(float* slot, const float* x_in, const float* dx_out, int b, int T) override;

  size_t attention_scratch_floats() const override;
  size_t attention_thread_scratch_bytes() const override;
  size_t own_workspace_floats() const override { return moe_ ? moe_->own_workspace_floats() : 0; }
  // Null for a dense block.
  MoeLayer* moe() override { return moe_.get(); }

 private:
  struct Norm {
    const ParamInfo *w_info, *b_info;
    const float *w, *b;
    float *dw, *db;
  };
  struct LinearParams {  // a linear layer's entries in the parameter table
    const ParamInfo *w = nullptr, *b = nullptr;
  };
  int rows(int b, int T) const;  // token rows of the residual stream on this rank
  // Context parallelism: the flash kernel's operands for this microbatch's qkv.
  FlashAttention flash_args(const float* qkv, int b, int T) const;
  void register_params(int layer, const ModelConfig& cfg, bool moe, ParamTable& table);
  void reserve_buffers(SlotLayout& layout, bool moe);
  // The passes, written once over the precision's ops (precision_ops.h: Fp32Ops, Bf16Ops).
  template <class Ops>
  void forward_with(const Ops& ops, float* slot, const float* x_in, float* x_out, int b, int T,
                    const ResidualChain& chain);
  template <class Ops>
  void backward_input_with(const Ops& ops, float* slot, const float* x_in, const float* dx_out,
                           float* dx_in, float* scratch, int b, int T);
  template <class Ops>
  void backward_weight_with(const Ops& ops, float* slot, const float* x_in, const float* dx_out,
                            int b, int T);

  // --dropout: the chunk's state (null or p = 0: none); the masked branch gradients' buffers.
  bool dropout_on() const { return dropout_ && dropout_->on(); }
  bf16* dx_mid16(float* s) const { return reinterpret_cast<bf16*>(s + off_.dx_mid16); }
  void branch_dropout(float* y, const float* x, int which, int b, int T, bool backward) const;

  int C_, max_b_, Cl_, Hl_, NHl_, T_;  // model dim, local attention width/hidden/heads
  int layer_ = 0;
  const DropoutState* dropout_ = nullptr;
  TensorParallelShard tp_;
  bool sp_ = false;
  bool gpu_kernels_ = false;          // a dry run for a GPU preset (model/kernel_target.h)
  bool flash_ = false;                // the flash core: under --cp or --dropout, or on a GPU
  bool recompute_attention_ = false;  // Recompute::selective
  bool bf16_ = false;                 // --precision bf16
  // Under bf16 without sequence parallelism or dropout: ln_2's input-gradient pass also writes
  // dx_mid's bf16 rounding (dx_mid16), which the attention projection's B and W both read
  // instead of each rounding dx_mid into the chunk's gather buffer.
  bool keep_dx_mid16_ = false;
  BlockContext context_;  // context.cp: attention across the cp group
  LayerScratch scratch_;  // the chunk's workspaces (set_scratch, set_bf16_scratch)
  float* probs_scratch_ = nullptr;
  // What `att` keeps between forward and backward: the probabilities, or where the kernel
  // recomputes them, each row's maximum and 1 / sum (kernels/attention.h).
  AttentionSaved saved_ = AttentionSaved::probabilities;
  // The attention kernel whose form and scratch the block counts: this CPU's, or in a dry
  // run for a local plan its profile's (model/kernel_target.h).
  AttentionKernel kernel_ = AttentionKernel::fp32_sgemm;
  Norm ln1_{}, ln2_{};
  LinearParams qkv_p_, attn_proj_p_, fc_p_, mlp_proj_p_;  // fc, mlp_proj unused in an MoE block
  tp::ColumnParallelLinear qkv_, fc_;
  tp::RowParallelLinear attn_proj_, mlp_proj_;
  std::unique_ptr<MoeLayer> moe_;
  // Offsets of this block's buffers within a slot. N = b*T rows; Nl = N, or N/t under
  // sequence parallelism. Under bf16, ln1_out, att_out, fc_out, d_fc, d_qkv (and ln2_out
  // in a dense block) hold bf16 values, the same counts in half the floats.
  struct {
    size_t ln1_out, ln1_mean, ln1_rstd;  // (Nl,C) (Nl) (Nl)
    size_t qkv, att, att_out;            // (N,3Cl) (b,NHl,T,T or 2) (N,Cl); att: none/full
    size_t lse;                          // (b,NHl,T): context parallelism only (no att)
    size_t x_mid;                        // (Nl,C)
    size_t ln2_out, ln2_mean, ln2_rstd;  // (Nl,C) (Nl) (Nl)
    size_t fc_pre, fc_out;               // (N,Hl) (N,Hl)
    // gradients kept for the W pass
    size_t d_fc, d_ln2, dx_mid, d_att_out, d_qkv,
        d_ln1;  // (N,Hl) (Nl,C) (Nl,C) (N,Cl) (N,3Cl) (Nl,C)
    // --dropout: the branches' output gradients through their masks (Nl,C) each
    size_t d_attn_branch, d_mlp_branch;
    size_t dx_mid16;  // (N,C) bf16: keep_dx_mid16_ only
  } off_{};
};

}  // namespace mt
