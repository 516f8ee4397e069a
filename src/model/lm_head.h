// Final norm (LayerNorm ln_f for gpt2, RMSNorm model.norm for llama), the LM head (tied to the
// token table, or llama's lm_head.weight) and mean cross-entropy (last pipeline stage).
// The loss gradient is produced in the forward pass (fused softmax-cross-entropy writes
// dlogits over the logits), since nothing after the loss can change it.
//
// Tensor parallelism: the head is a column-parallel layer over the vocabulary
// (tensor_parallel/column_parallel_linear.h: each rank multiplies by its rows of
// wte) and the loss is the vocabulary-parallel cross-entropy
// (vocab_parallel_cross_entropy.h): the full logits exist on no rank. Under sequence
// parallelism ln_f runs on this rank's rows only and its output is gathered into the slot
// and kept for the W pass.
//
// --precision bf16 (bf16_version non-null): the head multiplies a bf16 copy of its wte rows;
// ln_f's output is kept (and gathered) in bf16; the logits and the loss stay fp32, and
// dlogits is rounded to bf16 once, in its own place, by B, where W finds it.
#pragma once

#include "model/activation_pool.h"
#include "model/block.h"
#include "model/config.h"
#include "model/norm.h"
#include "model/param_table.h"
#include "model/precision_ops.h"
#include "tensor_parallel/column_parallel_linear.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mt {

// The final norm's tensors, registered (or found, when registered already).
Norm register_final_norm(const ModelConfig& cfg, const TensorParallelShard& tp, ParamTable& table);
// Every tensor the head uses, registered ahead of the head itself, which then finds them:
// a rank holding the embedding and the tied head in different chunks (DualPipeV's stage 0)
// keeps them all in the embedding chunk's edge unit (model_chunk.h, ChunkSpec::edge_holds_head).
void register_head_params(const ModelConfig& cfg, const TensorParallelShard& tp, ParamTable& table);

class LMHead {
 public:
  // Registers the final norm; uses the token table when tied (registers it when the
  // embedding lives on another stage: both stages then hold a copy), else lm_head.weight.
  LMHead(const ModelConfig& cfg, const TensorParallelShard& tp, int max_b, ParamTable& table,
         SlotLayout& layout, const uint64_t* bf16_version = nullptr);
  void bind(float* params, float* grads);
  // --precision bf16: the chunk's shared fp32 stage and bf16 gather scratch (block.h), and
  // the sizes the head needs of them.
  void set_bf16_scratch(float* stage, bf16* g16) { scratch_.stage = stage, scratch_.gather = g16; }
  size_t bf16_stage_floats() const;
  size_t bf16_gather_values() const;
  size_t bf16_weight_bytes() const { return head_.bf16_weight_bytes(); }
  // Bytes the head's weight gradient keeps on the rank's thread (Block::linear_scratch_bytes;
  // any_cpu: the most any CPU's bf16 path keeps, tensor_parallel/column_parallel_linear.h).
  size_t linear_scratch_bytes(bool any_cpu = false) const {
    return head_.weight_grad_scratch_bytes(max_n_, any_cpu);
  }
  void bf16_copies(std::vector<Bf16CopyTarget>& out) const { head_.bf16_copies(out); }
  // (b*T, C) floats the head may use between calls (sequence parallelism).
  void set_scratch(float* scratch) { scratch_.scratch = scratch; }

  // Returns the sum of per-token cross-entropies of targets (b, T) given x_in (b, T, C)
  // (this rank's rows under sequence parallelism; the sum is over all b*T tokens).
  // With dloss != 0 the slot keeps dlogits = dloss * (softmax - onehot) for backward.
  double forward(float* slot, const float* x_in, const int* targets, int b, int T, float dloss);
  // forward with the last block's closing residual add (Block::forward_chained) in the final
  // norm's row pass: x_in += pending (null: none) first, so x_in holds the sum afterwards.
  double forward_chained(float* slot, float* x_in, const float* pending, const int* targets, int b,
                         int T, float dloss);
  // dx_in (b, T, C) = gradient w.r.t. x_in (overwrites).
  void backward_input(float* slot, const float* x_in, float* dx_in, int b, int T);
  // dwte, dln_f += (the W pass).
  void backward_weight(float* slot, const float* x_in, int b, int T);
  // logits (b*T, V) of the last forward, before the gradient overwrote them (sampling uses
  // forward with dloss == 0). Under tensor parallelism: this rank's vocabulary columns.
  const float* logits(float* slot) const { return slot + off_.logits; }

 private:
  int rows(int b, int T) const { return b * T / (sp_ ? tp_.size : 1); }
  template <class Ops>
  const typename Ops::Act* dlogits(float* slot, size_t n, bool round) const;

  int C_, max_n_;
  bool bf16_;
  LayerScratch scratch_;  // the chunk's workspaces (set_scratch, set_bf16_scratch)
  TensorParallelShard tp_;
  bool sp_;
  tp::VocabShard shard_;
  tp::ColumnParallelLinear head_;  // (N, C) -> (N, Vl) logits, the tied wte rows, no bias
  const ParamInfo* wte_info_;      // the head's matrix (the token table when tied)
  Norm norm_;
  struct {
    // (Nl,C) (N,C) (N,Vl) (N) (3N) (Nl,C); Nl = N, or N/t under sequence parallelism.
    // lnf_out and lnf_full hold bf16 under --precision bf16.
    size_t lnf_out, lnf_full, logits, losses, ce_stats, d_lnf;
  } off_{};
};

}  // namespace mt
