#include "model/model_chunk.h"

#include <algorithm>
#include <cstring>

namespace mt {

ModelChunk::ModelChunk(const ModelConfig& cfg, const ChunkSpec& spec,
                       const TensorParallelShard& tp, int max_b, ParamTable& table)
    : cfg_(cfg), spec_(spec) {
  SlotLayout layout;
  const size_t N = size_t(max_b) * cfg.seq;
  if (spec.has_embedding) embedding_ = std::make_unique<EmbeddingLayer>(cfg, table);
  for (int l = spec.first_layer; l < spec.last_layer; ++l)
    blocks_.push_back(std::make_unique<Block>(l, cfg, tp, max_b, table, layout));
  if (spec.has_head) head_ = std::make_unique<LMHead>(cfg, max_b, table, layout);
  for (int i = 0; i <= nblocks(); ++i) {
    x_off_.push_back(layout.reserve(N * cfg.dim));
    dx_off_.push_back(layout.reserve(N * cfg.dim));
  }
  static_assert(sizeof(int) == sizeof(float));
  tokens_off_ = layout.reserve(2 * N);  // tokens then targets, as int32
  pool_ = std::make_unique<ActivationPool>(layout.total());
  size_t scratch = 0;
  for (auto& blk : blocks_) scratch = std::max(scratch, blk->attention_scratch_floats());
  attention_scratch_.resize(scratch);
}

void ModelChunk::bind(float* params, float* grads) {
  if (embedding_) embedding_->bind(params, grads);
  for (auto& blk : blocks_) blk->bind(params, grads);
  if (head_) head_->bind(params, grads);
}

double ModelChunk::forward(int slot, const int* tok, const int* targets, int b, int T,
                           float dloss) {
  const size_t N = size_t(b) * T;
  float* s = pool_->base(slot);
  int* saved = tokens(slot);
  if (embedding_) {
    std::memcpy(saved, tok, N * sizeof(int));
    embedding_->forward(x(slot, 0), saved, b, T);
  }
  for (int i = 0; i < nblocks(); ++i) blocks_[i]->forward(s, x(slot, i), x(slot, i + 1), b, T);
  if (!head_) return 0.0;
  int* saved_targets = targets ? saved + N : nullptr;
  if (targets) std::memcpy(saved_targets, targets, N * sizeof(int));
  return head_->forward(s, x(slot, nblocks()), saved_targets, b, T, dloss);
}

void ModelChunk::backward_input(int slot, int b, int T) {
  float* s = pool_->base(slot);
  if (head_) head_->backward_input(s, x(slot, nblocks()), dx(slot, nblocks()), b, T);
  for (int i = nblocks() - 1; i >= 0; --i)
    blocks_[i]->backward_input(s, x(slot, i), dx(slot, i + 1), dx(slot, i),
                               attention_scratch_.data(), b, T);
}

void ModelChunk::backward_weight(int slot, int b, int T) {
  float* s = pool_->base(slot);
  if (head_) head_->backward_weight(s, x(slot, nblocks()), b, T);
  for (int i = nblocks() - 1; i >= 0; --i)
    blocks_[i]->backward_weight(s, x(slot, i), dx(slot, i + 1), b, T);
  if (embedding_) embedding_->backward_weight(dx(slot, 0), tokens(slot), b, T);
}

}  // namespace mt
