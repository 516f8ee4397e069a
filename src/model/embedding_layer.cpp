#include "model/embedding_layer.h"

#include "kernels/embedding.h"
#include "parallel/tensor_parallel/mappings.h"

namespace mt {

const ParamInfo& register_token_table(const ModelConfig& cfg, const TensorParallelShard& tp,
                                      ParamTable& table) {
  if (const ParamInfo* wte = table.find("transformer.wte.weight")) return *wte;
  ShardSpec rows;
  if (tp.size > 1) {
    const tp::VocabShard s = tp::vocab_shard(cfg.vocab, tp.size, tp.rank);
    rows = ShardSpec{0, {{s.start, s.rows}}};  // rows beyond V are padding
  }
  return table.add("transformer.wte.weight", {cfg.vocab, cfg.dim}, InitKind::normal, 0.02f, rows);
}

EmbeddingLayer::EmbeddingLayer(const ModelConfig& cfg, const TensorParallelShard& tp,
                               ParamTable& table)
    : C_(cfg.dim), V_(cfg.vocab), tp_(tp), shard_(tp::vocab_shard(cfg.vocab, tp.size, tp.rank)) {
  wte_info_ = &register_token_table(cfg, tp, table);
  wpe_info_ = &table.add("transformer.wpe.weight", {cfg.position_rows(), C_}, InitKind::normal);
}

void EmbeddingLayer::bind(float* params, float* grads) {
  wte_ = params + wte_info_->offset;
  wpe_ = params + wpe_info_->offset;
  dwte_ = grads + wte_info_->offset;
  dwpe_ = grads + wpe_info_->offset;
}

void EmbeddingLayer::forward(float* x_out, const int* tokens, int b, int T, float* scratch) const {
  if (tp_.size == 1) {
    embedding_forward(x_out, tokens, wte_, wpe_, b, T, C_, 0, V_);
    return;
  }
  // Each id lives on one rank and wpe is added on rank 0 only: the sum adds exact zeros,
  // so the result is bitwise the one-worker wte[id] + wpe[t].
  const size_t N = size_t(b) * T;
  float* partial = tp_.sequence_parallel ? scratch : x_out;
  embedding_forward(partial, tokens, wte_, tp_.rank == 0 ? wpe_ : nullptr, b, T, C_, shard_.start,
                    shard_.rows);
  if (tp_.sequence_parallel)
    tp::ScatterToSequenceParallel::forward(tp_.comm, partial, x_out, N * C_ / tp_.size);
  else
    tp::ReduceFromTensorParallel::forward(tp_.comm, x_out, N * C_);
}

void EmbeddingLayer::backward_weight(const float* dx_out, const int* tokens, int b, int T,
                                     float* scratch) const {
  const float* d = dx_out;
  if (tp_.size > 1 && tp_.sequence_parallel) {
    const size_t N = size_t(b) * T;
    tp::ScatterToSequenceParallel::backward(tp_.comm, dx_out, scratch, N * C_ / tp_.size);
    d = scratch;
  }
  // The gradient is the whole (b, T, C) on every rank: dwpe comes out identical everywhere.
  embedding_backward(dwte_, dwpe_, d, tokens, b, T, C_, shard_.start,
                     tp_.size == 1 ? V_ : shard_.rows);
}

}  // namespace mt
