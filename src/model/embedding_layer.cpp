#include "model/embedding_layer.h"

namespace mt {

const ParamInfo& register_token_table(const ModelConfig& cfg, const TensorParallelShard& tp,
                                      ParamTable& table) {
  if (const ParamInfo* wte = table.find(cfg.token_table_name())) return *wte;
  ShardSpec rows;
  if (tp.size > 1) {
    const tp::VocabShard s = tp::vocab_shard(cfg.vocab, tp.size, tp.rank);
    rows = ShardSpec{0, {{s.start, s.rows}}};  // rows beyond V are padding
  }
  return table.add(cfg.token_table_name(), {cfg.vocab, cfg.dim}, InitKind::normal, 0.02f, rows);
}

const ParamInfo& register_head_matrix(const ModelConfig& cfg, const TensorParallelShard& tp,
                                      ParamTable& table) {
  if (cfg.tied()) return register_token_table(cfg, tp, table);
  ShardSpec rows;
  if (tp.size > 1) {
    const tp::VocabShard s = tp::vocab_shard(cfg.vocab, tp.size, tp.rank);
    rows = ShardSpec{0, {{s.start, s.rows}}};
  }
  return table.add(cfg.head_weight_name(), {cfg.vocab, cfg.dim}, InitKind::normal, 0.02f, rows);
}

EmbeddingLayer::EmbeddingLayer(const ModelConfig& cfg, const TensorParallelShard& tp,
                               ParamTable& table, const int* positions)
    : lookup_(tp, cfg.vocab, cfg.dim, positions) {
  wte_info_ = &register_token_table(cfg, tp, table);
  // Learned positions are the gpt2 block's; llama's are RoPE, inside attention (§9).
  if (!cfg.llama())
    wpe_info_ =
        &table.add("transformer.wpe.weight", {cfg.position_rows(), cfg.dim}, InitKind::normal);
}

void EmbeddingLayer::bind(float* params, float* grads) {
  lookup_.bind(params + wte_info_->offset, wpe_info_ ? params + wpe_info_->offset : nullptr,
               grads + wte_info_->offset, wpe_info_ ? grads + wpe_info_->offset : nullptr);
}

void EmbeddingLayer::forward(float* x_out, const int* tokens, int b, int T, float* scratch) const {
  lookup_.forward(x_out, tokens, b, T, scratch);
}

void EmbeddingLayer::backward_weight(const float* dx_out, const int* tokens, int b, int T,
                                     float* scratch) const {
  lookup_.backward_weight(dx_out, tokens, b, T, scratch);
}

}  // namespace mt
