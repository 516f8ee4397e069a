// A contiguous slice of the model held by one rank: optionally the embedding, blocks
// [first_layer, last_layer), optionally the final LayerNorm + LM head + loss. One worker
// holds one chunk with everything; a pipeline stage holds one chunk (or several, for
// interleaved schedules).
//
// Per microbatch the chunk keeps, in one activation slot, the residual stream between its
// blocks (x[0..n]) and the gradients flowing back (dx[0..n]):
//   x[0]  : chunk input — embedding output, or the activation received from the previous stage
//   x[i+1]: output of block i                         (b, T, C) each
//   dx[i] : gradient w.r.t. x[i]; dx[n] is received from the next stage (or made by the head)
// Under sequence parallelism (tp = t) each of these holds this rank's b*T/t token rows.
//
// Full recomputation (Recompute::full, docs/recomputation.md): the slot keeps only x, dx,
// the tokens and the head's buffers. Every block's own buffers live in one block-sized
// scratch shared by the chunk's blocks: forward writes them there (each block overwrites
// the previous one's), and each block's backward first runs the block's forward again
// into it from x[i], then its B and, at once, its W (the scratch is the next block's after
// that). So with the split backward the blocks' W run inside backward_input (hooks in the
// fused order: before_use, B, after_use, before_grads, W, grads_final); backward_weight
// keeps the head's and the embedding's W. The gradients between the blocks (dx[1..n-1])
// are then dead as soon as the block below has read them: they alternate between two
// buffers outside the slot. A mixture-of-experts block's recomputed forward routes and
// exchanges again (identically) but records no routing statistics (recompute_block).
//
// --precision bf16 (bf16_version non-null, docs/precision.md): the blocks and the head keep
// their GEMM-only buffers in bf16 (block.h); two workspaces shared by all of them hold fp32
// results before rounding and the bf16 operands of one call.
//
// Context parallelism (cp.size > 1): cfg.seq is this rank's T/cp rows of each sequence (its
// zigzag shard, model/zigzag_layout.h); the RoPE table (llama) and the learned position
// table (gpt2, cfg.positions rows) cover the whole sequence, and the blocks' attention
// crosses the cp group.
//
// A dry chunk (dry non-null: the memory estimate's dry run, model/dry_model.h) is built by
// the same code with dry arenas, and its blocks are stand-ins, one per kind
// (block_stand_ins.h); it reserves no memory and is never bound or run. footprint() reads
// what a chunk holds, dry or not.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "model/activation_pool.h"
#include "model/block.h"
#include "model/block_stand_ins.h"
#include "model/chunk_dropout.h"
#include "model/embedding_layer.h"
#include "model/lm_head.h"
#include "model/unit_size.h"

namespace mt {

// What a data-parallel engine is told while a chunk runs, per *unit*: unit 0 holds the
// chunk's edge parameters (embedding, final LayerNorm and the tied head: one unit because
// the head and the embedding share wte), unit 1 + i holds block i of the chunk. Units run
// forward 0, 1..n, 0 and backward 0, n..1, 0, so ZeRO-3 can gather a unit just before it
// is used and a bucketed reducer can launch as soon as a unit's gradients are final.
class ChunkHooks {
 public:
  virtual ~ChunkHooks() = default;
  // The unit's parameters are needed now; next_unit (-1: none) is the next one to run.
  virtual void before_use(int unit, int next_unit) = 0;
  // The unit's parameters are not needed again until the next before_use.
  virtual void after_use(int unit) = 0;
  // The unit is about to accumulate (+=) weight gradients.
  virtual void before_grads(int unit) = 0;
  // The unit's weight gradients of this microbatch are complete.
  virtual void grads_final(int unit) = 0;
};

struct ChunkSpec {
  int first_layer = 0, last_layer = 0;  // blocks [first, last)
  bool has_embedding = false, has_head = false;
  // Set by GPT on the embedding's chunk when a later chunk of the same rank holds the head
  // tied to it: the head's tensors (ln_f, and the tied wte) are then registered in this
  // chunk's edge unit, so that the unit holding wte holds everything the head binds, and
  // the head's own chunk has an empty edge unit (GPT::edge_chunk).
  bool edge_holds_head = false;
};

// Sets edge_holds_head where a rank's chunks hold the embedding and, in a later chunk, the
// head tied to it, and returns per chunk the chunk whose edge unit holds its edge tensors
// (itself, or the embedding's chunk for that head): GPT and the dry run (dry_model.h)
// build the same units from it.
std::vector<int> share_tied_edge(const ModelConfig& cfg, std::vector<ChunkSpec>& specs);

// What a chunk holds, as its constructor sized it.
struct ChunkFootprint {
  std::vector<UnitSize> units;   // unit 0 (the edge), then one per block
  size_t slot_floats = 0;        // one activation slot
  size_t workspace_floats = 0;   // outside the slots: the shared workspaces, the layers' own
  size_t bf16_weight_bytes = 0;  // --precision bf16: the linears' bf16 copies
  // Outside every arena: the experts' and the attention core's kernels' thread_local buffers
  // (MoeLayer::kernel_scratch, Block::attention_thread_scratch_bytes), the largest of the
  // chunk's layers, whose calls share them.
  size_t thread_scratch_bytes = 0;  // per OpenMP thread of the rank
  size_t rank_scratch_bytes = 0;    // once, on the rank's own thread
  // The linears' weight-gradient scratch (Block::linear_scratch_bytes, LMHead's), the largest
  // of the chunk's layers: one thread_local buffer on the rank's own thread, beside the
  // experts' (rank_scratch_bytes), which is another.
  size_t linear_scratch_bytes = 0;
};

class ModelChunk {
 public:
  ModelChunk(const ModelConfig& cfg, const ChunkSpec& spec, const TensorParallelShard& tp,
             int max_b, ParamTable& table, const ExpertParallelShard& ep = {},
             Recompute recompute = Recompute::none, const uint64_t* bf16_version = nullptr,
             BlockStandIns* dry = nullptr, const ContextParallelShard& cp = {});
  void bind(float* params, float* grads);

  // Rebinds one unit (see ChunkHooks) to other storage: its tensors are read at
  // params + info.offset and accumulate into grads + info.offset.
  void bind_unit(int unit, float* params, float* grads);
  int num_units() const { return 1 + nblocks(); }
  // Arena range [lo, hi) (floats, table offsets) of a unit's parameters; units are
  // disjoint and ordered (unit 0 lowest), each one contiguous. Not for a dry chunk, whose
  // blocks are not in the table.
  std::pair<size_t, size_t> unit_range(int unit) const { return unit_range_[unit]; }
  // Null: no hooks (the default).
  void set_hooks(ChunkHooks* hooks) { hooks_ = hooks; }

  ActivationPool& pool() { return *pool_; }
  // The mixture-of-experts layers of this chunk's blocks, first block first.
  std::vector<MoeLayer*> moe_layers();
  const ChunkSpec& spec() const { return spec_; }
  // --precision bf16: bytes of the bf16 weight copies this chunk's linears hold.
  size_t bf16_weight_bytes() const;
  void bf16_copies(std::vector<Bf16CopyTarget>& out) const;
  ChunkFootprint footprint() const;
  // --cp > 1: where the ring's per-step spans go (context_parallel_attention.h; --trace).
  void set_span_sink(const CpSpanSink& sink) {
    if (cp_attention_) cp_attention_->set_span_sink(sink);
  }

  // --dropout: the run's seed, this rank's first sequence, the step, each slot's microbatch
  // (model/chunk_dropout.h). Forward with dloss != 0 (training) and backward apply it.
  ChunkDropout& dropout() { return dropout_; }

  // Where a received activation must be written before forward (non-first chunks).
  float* input(int slot) { return x(slot, 0); }
  // The output activation to send to the next stage (non-last chunks).
  float* output(int slot) { return x(slot, nblocks()); }
  // Where the gradient from the next stage must be written before backward_input.
  float* grad_output(int slot) { return dx(slot, nblocks()); }
  // Gradient w.r.t. the chunk input, to send to the previous stage.
  float* grad_input(int slot) { return dx(slot, 0); }

  // Runs the chunk forward. tokens (b, T) are needed by the first chunk, targets (b, T) by
  // the last; both are copied into the slot (the W pass of the embedding needs tokens).
  // Returns the summed token loss (last chunk; 0 otherwise). dloss scales the loss
  // gradient (1 / global token count); 0 means evaluation only.
  double forward(int slot, const int* tokens, const int* targets, int b, int T, float dloss);
  // The split backward (zero-bubble schedules): B reads the weights and produces the
  // input gradient, W accumulates the weight gradients; both call the hooks in the fused
  // backward's unit order (before_use/after_use in B, before_grads/grads_final in W).
  void backward_input(int slot, int b, int T);
  void backward_weight(int slot, int b, int T);
  // backward_input and backward_weight interleaved layer by layer (B then W of the head,
  // then of each block, last first): the same arithmetic in the same order per gradient,
  // but each unit's gradients are final early, so their reduction overlaps the rest. A
  // unit's W may run inside the next block's B instead, while its MoE layer's first
  // dispatch travels (cover_below): still before that block's own W.
  void backward(int slot, int b, int T);
  // Last forward's logits (b*T, V) (evaluation / sampling; forward with dloss == 0).
  const float* logits(int slot) { return head_->logits(pool_->base(slot)); }

 private:
  // The constructor's phases: the layers (parameters and slot buffers, in unit order), the
  // residual stream and tokens in the slot, and the workspaces the layers share.
  void build_layers(const TensorParallelShard& tp, int max_b, ParamTable& table, SlotLayout& layout,
                    const ExpertParallelShard& ep, Recompute recompute,
                    const uint64_t* bf16_version, BlockStandIns* dry,
                    const ContextParallelShard& cp);
  // The RoPE table (llama), the rows' true positions and the cp attention (the zigzag
  // shard's under cp).
  BlockContext sequence_context(int max_b, const TensorParallelShard& tp,
                                const ContextParallelShard& cp);
  // Builds block `layer` into a table and a slot layout.
  using BlockBuilder = std::function<std::unique_ptr<Block>(int, ParamTable&, SlotLayout&)>;
  // Block `layer`, its buffers reserved in `layout` (or, dry, its stand-in's counted
  // there); returns the floats of its buffers.
  size_t add_block(int layer, const BlockBuilder& build, ParamTable& table, SlotLayout& layout,
                   BlockStandIns* dry);
  void reserve_residual_stream(SlotLayout& layout, size_t N, size_t Nl);
  void share_workspaces(size_t N, bool sp, bool bf16_precision);
  int nblocks() const { return int(blocks_.size()); }
  float* x(int slot, int i) { return pool_->base(slot) + x_off_[i]; }
  float* dx(int slot, int i) {
    if (full_ && i > 0 && i < nblocks())
      return residual_grads_.data() + size_t((i - 1) % 2) * residual_grad_stride_;
    return pool_->base(slot) + dx_off_[i];
  }
  int* tokens(int slot) { return reinterpret_cast<int*>(pool_->base(slot) + tokens_off_); }
  // Where the blocks' buffers are: the slot, or under full recomputation the block scratch.
  float* block_base(int slot) { return full_ ? block_scratch_.data() : pool_->base(slot); }
  // Full recomputation: block i's forward again, into the block scratch (x_out: dx[i],
  // which its B overwrites).
  void recompute_block(int slot, int i, int b, int T);
  // Block i's MoE layer if it takes the unit above's W under its first backward dispatch
  // (MoeLayer::takes_backward_cover), else null.
  MoeLayer* cover_below(int i) const;

  void before_use(int unit, int next) {
    if (hooks_) hooks_->before_use(unit, next);
  }
  void after_use(int unit) {
    if (hooks_) hooks_->after_use(unit);
  }
  void before_grads(int unit) {
    if (hooks_) hooks_->before_grads(unit);
  }
  void grads_final(int unit) {
    if (hooks_) hooks_->grads_final(unit);
  }

  ModelConfig cfg_;
  ChunkSpec spec_;
  ChunkDropout dropout_;  // --dropout: the slots' tokens and the state the blocks read
  ChunkHooks* hooks_ = nullptr;
  bool full_ = false;  // Recompute::full
  Arena::Mode mode_ = Arena::Mode::allocate;
  KernelTarget kernels_ = KernelTarget::this_host;  // a dry run's (model/kernel_target.h)
  std::vector<std::pair<size_t, size_t>> unit_range_;
  std::vector<UnitSize> units_;
  std::unique_ptr<EmbeddingLayer> embedding_;
  std::vector<std::unique_ptr<Block>> own_blocks_;  // empty in a dry chunk
  std::vector<Block*> blocks_;                      // one per layer (dry: the stand-ins)
  std::unique_ptr<LMHead> head_;
  std::unique_ptr<ActivationPool> pool_;
  Arena attention_scratch_;     // shared by all blocks: one backward runs at a time
  Arena sp_scratch_;            // (N, C), sequence parallelism only; shared likewise
  Arena forward_scratch_;       // Block::forward_scratch_floats (the gpt2 block's probabilities
                                // under selective recomputation, llama's flash forward); likewise
  RopeTable rope_;              // llama: the blocks' RoPE table
  std::vector<int> positions_;  // one worker: the true position of each of the seq rows
  std::unique_ptr<ContextParallelAttention> cp_attention_;  // --cp > 1; shared likewise
  Arena block_scratch_;   // one block's buffers, full recomputation only; shared likewise
  Arena residual_grads_;  // full recomputation: dx[1..n-1], two alternating buffers
  Arena bf16_stage_;      // --precision bf16: fp32 results before rounding; shared likewise
  Arena bf16_gather_;     // --precision bf16: bf16 GEMM operands of one call; shared likewise
  size_t residual_grad_stride_ = 0;
  std::vector<size_t> x_off_, dx_off_;
  size_t tokens_off_ = 0;
};

}  // namespace mt
