// A transformer block as a model chunk runs it (model_chunk.h), whatever its architecture:
// GptBlock (--arch gpt2, gpt_block.h) or LlamaBlock (--arch llama, llama_block.h).
//
// A block registers its parameters in the table and reserves the buffers its backward needs
// in the chunk's slot layout when it is built; it reads and writes the residual stream
// (b, T, C) (this rank's b*T/t rows under sequence parallelism) and keeps its own state in the
// microbatch's slot. Backward is split: backward_input (B) produces dx_in and keeps the
// intermediate gradients in the slot, backward_weight (W) turns them into weight gradients
// later (zero-bubble schedules defer it). Workspaces whose every use ends inside one call are
// the chunk's, shared by its blocks: the block says how much it needs, the chunk hands it out.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bf16_weight.h"
#include "kernels/rope.h"
#include "model/activation_pool.h"
#include "model/config.h"
#include "model/context_parallel_attention.h"
#include "model/dropout_state.h"
#include "model/kernel_target.h"
#include "model/moe_layer.h"
#include "model/param_table.h"
#include "model/recompute.h"
#include "tensor_parallel/tensor_parallel_shard.h"

namespace mt {

// Block i's MLP is a mixture of experts when --experts > 0, i >= --first-dense-layers and
// (i + 1) % --moe-every == 0: every block for moe_every 1, the second, fourth, ... for 2 (the
// last block of each group), ModelConfig::is_moe.
inline bool is_moe_layer(const ModelConfig& cfg, int layer) {
  return cfg.is_moe(layer);
}

// Blocks of one kind hold the same sizes (parameters, slot buffers, workspaces), whatever
// their layer: the memory estimate's dry run builds one block of each kind and counts it
// for every layer of that kind (model/block_stand_ins.h). A block whose sizes can differ
// from another's must differ from it in kind.
inline int block_kind(const ModelConfig& cfg, int layer) {
  return is_moe_layer(cfg, layer) ? 1 : 0;
}

class Block {
 public:
  virtual ~Block() = default;

  virtual void bind(float* params, float* grads) = 0;
  // --precision bf16: stage (bf16_stage_floats() fp32) receives fp32 results before they are
  // rounded into the slot; g16 (bf16_gather_values() bf16) holds gathered or rounded GEMM
  // operands during one call. The weight bytes count the bf16 copies the block holds.
  virtual void set_bf16_scratch(float* stage, bf16* g16) = 0;
  virtual size_t bf16_stage_floats() const = 0;
  virtual size_t bf16_gather_values() const = 0;
  virtual size_t bf16_weight_bytes() const = 0;
  // The dense linears' bf16 weight copies with their bound weights (kernels/bf16_weight.h),
  // appended to out; an MoE layer's expert copies are not among them.
  virtual void bf16_copies(std::vector<Bf16CopyTarget>& out) const = 0;
  // (max_b*T, C) floats for sequence parallelism's gathered inputs and partial outputs.
  virtual void set_scratch(float* scratch) = 0;
  // A workspace used by forward and by B's recomputation (the gpt2 block's probabilities under
  // selective recomputation, the llama block's flash attention forward); 0 if none.
  virtual size_t forward_scratch_floats() const = 0;
  virtual void set_forward_scratch(float* scratch) = 0;

  // x_out (b, T, C) = block(x_in (b, T, C)); x_in must stay untouched until backward_weight.
  virtual void forward(float* slot, const float* x_in, float* x_out, int b, int T) = 0;
  // forward with the closing residual add (x_out += x_mid) between two blocks of a chunk
  // folded into the second block's first norm, which reads the sum from L1 as it writes it
  // instead of a pass of its own (the GPT block's ln_1, the Llama block's attention norm).
  // `pending` (null: none) is what the block before left out of x_in: it is added into x_in
  // in place before anything reads it, so x_in holds the summed stream afterwards, as
  // forward's input does (the backward and the saved inputs read it). With leave_open the
  // block leaves x_out without its own x_mid and returns that x_mid (in its slot, live until
  // the next forward on this slot) for the next block, or for the head's final norm after a
  // chunk's last block (LMHead::forward_chained); otherwise it adds it and returns null.
  // Bitwise forward's results: the same additions, one per element.
  virtual const float* forward_chained(float* slot, float* x_in, const float* pending, float* x_out,
                                       bool leave_open, int b, int T) = 0;
  // dx_in (b, T, C) = gradient w.r.t. x_in, from dx_out (b, T, C). Overwrites dx_in.
  // scratch: attention_scratch_floats() floats.
  virtual void backward_input(float* slot, const float* x_in, const float* dx_out, float* dx_in,
                              float* scratch, int b, int T) = 0;
  // Weight gradients (+=) from the gradients backward_input kept in the slot.
  virtual void backward_weight(float* slot, const float* x_in, const float* dx_out, int b,
                               int T) = 0;
  // The workspace backward_input needs (its `scratch`).
  virtual size_t attention_scratch_floats() const = 0;
  // Bytes its attention kernel keeps per thread outside every arena (thread_local buffers
  // that live as long as the thread); 0 if none.
  virtual size_t attention_thread_scratch_bytes() const { return 0; }
  // Bytes its linears' weight gradients keep on the rank's thread outside every arena (a
  // thread_local buffer that only grows: the largest of its layers'); 0 if none.
  virtual size_t linear_scratch_bytes() const { return 0; }
  // Floats of the arenas the block holds itself, outside the slot and the chunk's
  // workspaces (an MoE block's per-call rows).
  virtual size_t own_workspace_floats() const = 0;
  // Null for a dense block.
  virtual MoeLayer* moe() = 0;
};

// The closing residual add a block hands to the next (Block::forward_chained): x_in receives
// `pending` in its first norm's row pass when non-null; leave_open skips the block's own add.
struct ResidualChain {
  float* x_in = nullptr;  // the block's input, written in place when `pending` is set
  const float* pending = nullptr;
  bool leave_open = false;
};

// What every block of a chunk shares and does not own.
struct BlockContext {
  const RopeTable* rope = nullptr;  // llama: the chunk's RoPE table (the whole sequence's)
  // The true position of each of the seq rows (0..seq-1 on one worker).
  const int* positions = nullptr;
  // --cp > 1: attention across the cp group (the rows are this rank's zigzag shard).
  ContextParallelAttention* cp = nullptr;
  // --dropout > 0: the chunk's dropout state, pointing at the running microbatch.
  const DropoutState* dropout = nullptr;
  // A dry run for a GPU preset or a local plan's profile (model/kernel_target.h): the
  // attention core and the kernels' scratch counted as that device's kernels keep them, not
  // as this CPU's dispatch would; profile: what the profile says of its CPU.
  KernelTarget kernels = KernelTarget::this_host;
  ProfileKernels profile{};
};

// The block of cfg.arch for layer `layer` (the arguments as GptBlock's).
std::unique_ptr<Block> make_block(int layer, const ModelConfig& cfg, const TensorParallelShard& tp,
                                  int max_b, ParamTable& table, SlotLayout& layout,
                                  const ExpertParallelShard& ep, Recompute recompute,
                                  const uint64_t* bf16_version, const BlockContext& context);

}  // namespace mt
