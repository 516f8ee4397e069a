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
#pragma once

#include <memory>
#include <vector>

#include "core/arena.h"
#include "model/activation_pool.h"
#include "model/block.h"
#include "model/embedding_layer.h"
#include "model/lm_head.h"

namespace mt {

struct ChunkSpec {
  int first_layer = 0, last_layer = 0;  // blocks [first, last)
  bool has_embedding = false, has_head = false;
};

class ModelChunk {
 public:
  ModelChunk(const ModelConfig& cfg, const ChunkSpec& spec, const TensorParallelShard& tp,
             int max_b, ParamTable& table);
  void bind(float* params, float* grads);

  ActivationPool& pool() { return *pool_; }
  const ChunkSpec& spec() const { return spec_; }

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
  void backward_input(int slot, int b, int T);
  void backward_weight(int slot, int b, int T);
  // Last forward's logits (b*T, V) (evaluation / sampling; forward with dloss == 0).
  const float* logits(int slot) { return head_->logits(pool_->base(slot)); }

 private:
  int nblocks() const { return int(blocks_.size()); }
  float* x(int slot, int i) { return pool_->base(slot) + x_off_[i]; }
  float* dx(int slot, int i) { return pool_->base(slot) + dx_off_[i]; }
  int* tokens(int slot) { return reinterpret_cast<int*>(pool_->base(slot) + tokens_off_); }

  ModelConfig cfg_;
  ChunkSpec spec_;
  std::unique_ptr<EmbeddingLayer> embedding_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<LMHead> head_;
  std::unique_ptr<ActivationPool> pool_;
  Arena attention_scratch_;  // shared by all blocks: one backward runs at a time
  std::vector<size_t> x_off_, dx_off_;
  size_t tokens_off_ = 0;
};

}  // namespace mt
