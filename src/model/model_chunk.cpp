#include "model/model_chunk.h"

#include <algorithm>
#include <cstring>

namespace mt {

namespace {

// Arena range of the table entries added since `first` (empty: the current end).
std::pair<size_t, size_t> range_since(const ParamTable& table, size_t first) {
  const auto& e = table.entries();
  if (first == e.size()) return {table.total(), table.total()};
  const ParamInfo& last = e.back();
  return {e[first].offset, last.offset + (last.numel + 15) / 16 * 16};
}

}  // namespace

std::vector<int> share_tied_edge(const ModelConfig& cfg, std::vector<ChunkSpec>& specs) {
  std::vector<int> edge(specs.size());
  int embedding = -1;
  for (size_t c = 0; c < specs.size(); ++c) {
    edge[c] = int(c);
    if (specs[c].has_embedding) embedding = int(c);
    if (specs[c].has_head && !specs[c].has_embedding && embedding >= 0 && cfg.tied()) {
      specs[size_t(embedding)].edge_holds_head = true;
      edge[c] = embedding;
    }
  }
  return edge;
}

ModelChunk::ModelChunk(const ModelConfig& cfg, const ChunkSpec& spec, const TensorParallelShard& tp,
                       int max_b, ParamTable& table, const ExpertParallelShard& ep,
                       Recompute recompute, const uint64_t* bf16_version, BlockStandIns* dry,
                       const ContextParallelShard& cp)
    : cfg_(cfg),
      spec_(spec),
      dropout_(cfg.dropout, tp.splits_sequence() ? tp.rank : 0, tp.splits_sequence() ? tp.size : 1),
      full_(recompute == Recompute::full),
      mode_(dry ? Arena::Mode::dry : Arena::Mode::allocate) {
  SlotLayout layout;
  const bool sp = tp.size > 1 && tp.sequence_parallel;
  const size_t N = size_t(max_b) * cfg.seq, Nl = sp ? N / tp.size : N;
  build_layers(tp, max_b, table, layout, ep, recompute, bf16_version, dry, cp);
  reserve_residual_stream(layout, N, Nl);
  pool_ = std::make_unique<ActivationPool>(layout.total());
  share_workspaces(N, sp, bf16_version != nullptr);
}

void ModelChunk::build_layers(const TensorParallelShard& tp, int max_b, ParamTable& table,
                              SlotLayout& layout, const ExpertParallelShard& ep,
                              Recompute recompute, const uint64_t* bf16_version, BlockStandIns* dry,
                              const ContextParallelShard& cp) {
  const size_t blocks = size_t(spec_.last_layer - spec_.first_layer);
  blocks_.reserve(blocks), units_.reserve(1 + blocks), unit_range_.reserve(1 + blocks);
  // The edge unit (embedding, ln_f, tied wte) is registered first so that its tensors are
  // contiguous in the arena: ZeRO shards and gathers each unit as one range.
  const size_t first = table.entries().size();
  BlockContext context = sequence_context(max_b, tp, cp);
  if (dry) {  // a dry run's stand-ins say whose kernels
    context.kernels = dry->target();
    context.profile = dry->profile();
  }
  kernels_ = context.kernels;
  dropout_.set_positions(context.positions, cfg_.seq * cp.size);
  if (dropout_.enabled()) context.dropout = dropout_.state();
  // Under cp the learned position table is read at the rows' true positions.
  if (spec_.has_embedding)
    embedding_ =
        std::make_unique<EmbeddingLayer>(cfg_, tp, table, context.cp ? context.positions : nullptr);
  if (spec_.has_head)
    head_ = std::make_unique<LMHead>(cfg_, tp, max_b, table, layout, bf16_version);
  else if (spec_.edge_holds_head)
    register_head_params(cfg_, tp, table);
  unit_range_.push_back(range_since(table, first));
  units_.push_back(unit_size_since(table, first));
  // The MoE layers learn the bf16 weight version (and a dry run) through the shard the
  // Block hands them.
  ExpertParallelShard moe_ep = ep;
  moe_ep.bf16_version = bf16_version;
  moe_ep.dry = dry != nullptr;
  moe_ep.cp = cp;
  // Full recomputation: each block's buffers from offset 0 of the block scratch.
  const Recompute block_recompute = full_ ? Recompute::none : recompute;
  const BlockBuilder build = [&](int l, ParamTable& t, SlotLayout& s) {
    return make_block(l, cfg_, tp, max_b, t, s, moe_ep, block_recompute, bf16_version, context);
  };
  size_t block_floats = 0;
  for (int l = spec_.first_layer; l < spec_.last_layer; ++l)
    block_floats = std::max(block_floats, add_block(l, build, table, layout, dry));
  block_scratch_ = Arena(full_ ? block_floats : 0, mode_);
}

// llama: one RoPE table for all the chunk's blocks (the whole sequence's). One worker's rows
// are positions 0..seq-1; a cp rank's are its zigzag shard of the cp * seq positions, and its
// blocks' attention (either arch) crosses the cp group.
BlockContext ModelChunk::sequence_context(int max_b, const TensorParallelShard& tp,
                                          const ContextParallelShard& cp) {
  const int whole = cfg_.seq * cp.size;
  // A dry chunk (the memory estimate) sizes what it would hold; the table is not among it.
  if (cfg_.llama() && mode_ == Arena::Mode::allocate)
    rope_ = RopeTable(cfg_.head_dim(), whole, cfg_.rope_theta, cfg_.rope_scaling);
  const RopeTable* rope = cfg_.llama() ? &rope_ : nullptr;
  if (!cp.splits_sequence()) {
    // gpt2: its flash core (--dropout) reads them; its own attention kernels do not.
    positions_.resize(cfg_.seq);
    for (int t = 0; t < cfg_.seq; ++t) positions_[t] = t;
    return {.rope = rope, .positions = positions_.data()};
  }
  const int kv_heads = cfg_.llama() ? cfg_.kv() : cfg_.heads;
  const int kv_width = kv_heads / tp.size * cfg_.head_dim();
  cp_attention_ = std::make_unique<ContextParallelAttention>(cp, whole, size_t(max_b) * cfg_.seq,
                                                             kv_width, mode_);
  return {.rope = rope, .positions = cp_attention_->positions(), .cp = cp_attention_.get()};
}

size_t ModelChunk::add_block(int layer, const BlockBuilder& build, ParamTable& table,
                             SlotLayout& layout, BlockStandIns* dry) {
  if (dry) {
    const BlockStandIns::StandIn& s = dry->get(
        block_kind(cfg_, layer), [&](ParamTable& t, SlotLayout& l) { return build(layer, t, l); });
    blocks_.push_back(s.block.get());
    units_.push_back(s.unit);
    if (!full_) layout.reserve(s.slot_floats);
    return s.slot_floats;
  }
  const size_t first = table.entries().size();
  SlotLayout own;  // full recomputation: the block scratch's layout
  SlotLayout& into = full_ ? own : layout;
  const size_t before = into.total();
  own_blocks_.push_back(build(layer, table, into));
  blocks_.push_back(own_blocks_.back().get());
  unit_range_.push_back(range_since(table, first));
  units_.push_back(unit_size_since(table, first));
  return into.total() - before;
}

// The residual stream between blocks: this rank's rows of it under sequence parallelism.
// Full recomputation runs each block's W right after its B, so the gradients between the
// blocks, dx[1..n-1], are dead once the block below has read them: two buffers outside
// the slot, alternating, hold them. dx[0] (the embedding's W, the previous stage) and
// dx[n] (received, or the head's) stay in the slot.
void ModelChunk::reserve_residual_stream(SlotLayout& layout, size_t N, size_t Nl) {
  x_off_.reserve(size_t(nblocks()) + 1), dx_off_.reserve(size_t(nblocks()) + 1);
  for (int i = 0; i <= nblocks(); ++i) {
    x_off_.push_back(layout.reserve(Nl * cfg_.dim));
    const bool between = full_ && i > 0 && i < nblocks();
    dx_off_.push_back(between ? 0 : layout.reserve(Nl * cfg_.dim));
  }
  residual_grad_stride_ = (Nl * cfg_.dim + 15) / 16 * 16;
  const size_t between = full_ ? size_t(std::clamp(nblocks() - 1, 0, 2)) : 0;
  residual_grads_ = Arena(between * residual_grad_stride_, mode_);
  static_assert(sizeof(int) == sizeof(float));
  tokens_off_ = layout.reserve(2 * N);  // tokens then targets, as int32
}

// Workspaces every use of which ends inside one call of one layer: one of each kind, sized
// for the largest user, shared by all the chunk's layers.
void ModelChunk::share_workspaces(size_t N, bool sp, bool bf16_precision) {
  size_t probs = 0, scratch = 0;
  for (auto& blk : blocks_) {
    probs = std::max(probs, blk->forward_scratch_floats());
    scratch = std::max(scratch, blk->attention_scratch_floats());
  }
  forward_scratch_ = Arena(probs, mode_);
  for (auto& blk : blocks_) blk->set_forward_scratch(forward_scratch_.data());
  attention_scratch_ = Arena(scratch, mode_);
  // One (N, C) buffer for the gathered inputs and partial outputs of sequence parallelism.
  if (sp) {
    sp_scratch_ = Arena(N * cfg_.dim, mode_);
    for (auto& blk : blocks_) blk->set_scratch(sp_scratch_.data());
    if (head_) head_->set_scratch(sp_scratch_.data());
  }
  if (!bf16_precision) return;
  size_t stage = head_ ? head_->bf16_stage_floats() : 0;
  size_t gather = head_ ? head_->bf16_gather_values() : 0;
  for (auto& blk : blocks_) {
    stage = std::max(stage, blk->bf16_stage_floats());
    gather = std::max(gather, blk->bf16_gather_values());
  }
  bf16_stage_ = Arena(stage, mode_);
  bf16_gather_ = Arena((gather + 1) / 2, mode_);
  bf16* g16 = reinterpret_cast<bf16*>(bf16_gather_.data());
  for (auto& blk : blocks_) blk->set_bf16_scratch(bf16_stage_.data(), g16);
  if (head_) head_->set_bf16_scratch(bf16_stage_.data(), g16);
}

size_t ModelChunk::bf16_weight_bytes() const {
  size_t bytes = head_ ? head_->bf16_weight_bytes() : 0;
  for (const auto& blk : blocks_) bytes += blk->bf16_weight_bytes();
  return bytes;
}

void ModelChunk::bf16_copies(std::vector<Bf16CopyTarget>& out) const {
  if (head_) head_->bf16_copies(out);
  for (const Block* blk : blocks_) blk->bf16_copies(out);
}

ChunkFootprint ModelChunk::footprint() const {
  ChunkFootprint f;
  f.units = units_;
  f.slot_floats = pool_->slot_floats();
  for (const Arena* a : {&attention_scratch_, &sp_scratch_, &forward_scratch_, &block_scratch_,
                         &residual_grads_, &bf16_stage_, &bf16_gather_})
    f.workspace_floats += a->size();
  for (const Block* blk : blocks_) {
    f.workspace_floats += blk->own_workspace_floats();
    f.thread_scratch_bytes =
        std::max(f.thread_scratch_bytes, blk->attention_thread_scratch_bytes());
    f.linear_scratch_bytes = std::max(f.linear_scratch_bytes, blk->linear_scratch_bytes());
  }
  for (const auto& blk : blocks_)
    if (const MoeLayer* moe = blk->moe()) {
      const ExpertMlp::KernelScratch k = moe->kernel_scratch();
      f.thread_scratch_bytes = std::max(f.thread_scratch_bytes, k.per_thread);
      f.rank_scratch_bytes = std::max(f.rank_scratch_bytes, k.per_rank);
    }
  if (head_)
    f.linear_scratch_bytes = std::max(
        f.linear_scratch_bytes, head_->linear_scratch_bytes(kernels_ == KernelTarget::profile));
  if (cp_attention_) f.workspace_floats += cp_attention_->workspace_floats();
  f.bf16_weight_bytes = bf16_weight_bytes();
  return f;
}

std::vector<MoeLayer*> ModelChunk::moe_layers() {
  std::vector<MoeLayer*> out;
  for (auto& blk : blocks_)
    if (blk->moe()) out.push_back(blk->moe());
  return out;
}

void ModelChunk::bind(float* params, float* grads) {
  for (int u = 0; u < num_units(); ++u) bind_unit(u, params, grads);
}

void ModelChunk::bind_unit(int unit, float* params, float* grads) {
  if (unit == 0) {
    if (embedding_) embedding_->bind(params, grads);
    if (head_) head_->bind(params, grads);
  } else {
    blocks_[unit - 1]->bind(params, grads);
  }
}

double ModelChunk::forward(int slot, const int* tok, const int* targets, int b, int T,
                           float dloss) {
  const size_t N = size_t(b) * T;
  float* s = pool_->base(slot);
  int* saved = tokens(slot);
  const int n = nblocks();
  dropout_.activate(slot, dloss != 0.f);  // training; evaluation and sampling pass 0
  if (embedding_) {
    before_use(0, n > 0 ? 1 : -1);
    std::memcpy(saved, tok, N * sizeof(int));
    embedding_->forward(x(slot, 0), saved, b, T, sp_scratch_.data());
    dropout_.embedding(x(slot, 0), int(N), cfg_.dim, false);
  }
  // Each block's closing residual add folded into the next block's first norm
  // (Block::forward_chained), the last block's into the head's final norm; a chunk without
  // the head has its last block add its own, so the next stage receives the summed stream.
  // Not under full recomputation: there the blocks share one scratch, where the next block's
  // forward would overwrite the x_mid still to be added.
  const float* pending = nullptr;
  for (int i = 0; i < n; ++i) {
    before_use(1 + i, i + 1 < n ? 2 + i : (head_ ? 0 : -1));
    const bool leave_open = !full_ && (i + 1 < n || head_);
    pending = blocks_[i]->forward_chained(block_base(slot), x(slot, i), pending, x(slot, i + 1),
                                          leave_open, b, T);
    after_use(1 + i);
  }
  if (!head_) {
    if (embedding_) after_use(0);
    return 0.0;
  }
  // In training the head's backward follows at once, so the edge unit stays in use.
  before_use(0, dloss != 0.f && n > 0 ? n : -1);
  int* saved_targets = targets ? saved + N : nullptr;
  if (targets) std::memcpy(saved_targets, targets, N * sizeof(int));
  const double loss = head_->forward_chained(s, x(slot, n), pending, saved_targets, b, T, dloss);
  if (dloss == 0.f) after_use(0);
  return loss;
}

// A mixture-of-experts block routes again exactly as its forward did (the same input, router
// weights and selection bias: they change only after the step), and exchanges its tokens
// again on every rank of its ep group, which recomputes at the same point of the schedule;
// but its routing statistics (expert load, aux loss, the bias update's counts) were taken by
// the forward, so the recomputation does not record them again.
void ModelChunk::recompute_block(int slot, int i, int b, int T) {
  MoeLayer* moe = blocks_[i]->moe();
  const bool recording = moe && moe->records_stats();
  if (recording) moe->set_record_stats(false);
  blocks_[i]->forward(block_scratch_.data(), x(slot, i), dx(slot, i), b, T);
  if (recording) moe->set_record_stats(true);
}

// The split backward calls the hooks as the fused one does, so a data-parallel engine sees
// the same unit order: B reads the weights (before_use / after_use), W only accumulates
// (before_grads / grads_final; it needs no weights, only the slot's activations).
void ModelChunk::backward_input(int slot, int b, int T) {
  float* s = pool_->base(slot);
  dropout_.activate(slot, true);
  const int n = nblocks();
  if (head_) {
    before_use(0, n > 0 ? n : -1);
    head_->backward_input(s, x(slot, n), dx(slot, n), b, T);
  }
  for (int i = n - 1; i >= 0; --i) {
    before_use(1 + i, i > 0 ? i : -1);
    if (full_) recompute_block(slot, i, b, T);
    blocks_[i]->backward_input(block_base(slot), x(slot, i), dx(slot, i + 1), dx(slot, i),
                               attention_scratch_.data(), b, T);
    after_use(1 + i);
    if (full_) {  // the recomputed buffers are the next block's scratch: W now
      before_grads(1 + i);
      blocks_[i]->backward_weight(block_base(slot), x(slot, i), dx(slot, i + 1), b, T);
      grads_final(1 + i);
    }
  }
  if (head_ || embedding_) after_use(0);
}

void ModelChunk::backward_weight(int slot, int b, int T) {
  float* s = pool_->base(slot);
  dropout_.activate(slot, true);
  const int n = nblocks();
  if (head_) {
    before_grads(0);
    head_->backward_weight(s, x(slot, n), b, T);
  }
  for (int i = n - 1; i >= 0 && !full_; --i) {  // full: done in backward_input
    before_grads(1 + i);
    blocks_[i]->backward_weight(s, x(slot, i), dx(slot, i + 1), b, T);
    grads_final(1 + i);
  }
  if (embedding_) {
    before_grads(0);
    dropout_.embedding(dx(slot, 0), b * T, cfg_.dim, true);
    embedding_->backward_weight(dx(slot, 0), tokens(slot), b, T, sp_scratch_.data());
  }
  if (head_ || embedding_) grads_final(0);
}

// The block below takes the unit above's W as cover for its MoE layer's first backward
// dispatch (MoeLayer::takes_backward_cover): W then runs while the rows travel, not before
// they leave. The same calls on the same buffers, so the gradients are bit for bit the same;
// only when W runs moves. Not with full recomputation (the blocks share one scratch).
MoeLayer* ModelChunk::cover_below(int i) const {
  if (full_ || i < 0) return nullptr;
  MoeLayer* moe = blocks_[i]->moe();
  return moe && moe->takes_backward_cover() ? moe : nullptr;
}

void ModelChunk::backward(int slot, int b, int T) {
  float* s = pool_->base(slot);
  dropout_.activate(slot, true);
  const int n = nblocks();
  // Phase: the head; its W now, or under the top block's first dispatch.
  if (head_) {
    before_use(0, n > 0 ? n : -1);
    head_->backward_input(s, x(slot, n), dx(slot, n), b, T);
    before_grads(0);
    const auto head_w = [this, s, slot, b, T, n] { head_->backward_weight(s, x(slot, n), b, T); };
    if (MoeLayer* below = cover_below(n - 1))
      below->cover_next_backward(head_w);
    else
      head_w();
  }
  // Phase: the blocks, top down, B then W, each W possibly under the next block's dispatch.
  float* bs = block_base(slot);
  for (int i = n - 1; i >= 0; --i) {
    before_use(1 + i, i > 0 ? i : -1);
    if (full_) recompute_block(slot, i, b, T);
    blocks_[i]->backward_input(bs, x(slot, i), dx(slot, i + 1), dx(slot, i),
                               attention_scratch_.data(), b, T);
    after_use(1 + i);
    // W needs no weights, only the slot's activations and gradients.
    before_grads(1 + i);
    const auto block_w = [this, bs, slot, b, T, i] {
      blocks_[i]->backward_weight(bs, x(slot, i), dx(slot, i + 1), b, T);
      grads_final(1 + i);
    };
    if (MoeLayer* below = cover_below(i - 1))
      below->cover_next_backward(block_w);
    else
      block_w();
  }
  // Phase: the embedding.
  if (embedding_) {
    before_grads(0);
    dropout_.embedding(dx(slot, 0), b * T, cfg_.dim, true);
    embedding_->backward_weight(dx(slot, 0), tokens(slot), b, T, sp_scratch_.data());
  }
  if (head_ || embedding_) {
    after_use(0);
    grads_final(0);
  }
}

}  // namespace mt
