#include "model/embedding_layer.h"

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
    : lookup_(tp, cfg.vocab, cfg.dim) {
  wte_info_ = &register_token_table(cfg, tp, table);
  wpe_info_ =
      &table.add("transformer.wpe.weight", {cfg.position_rows(), cfg.dim}, InitKind::normal);
}

void EmbeddingLayer::bind(float* params, float* grads) {
  lookup_.bind(params + wte_info_->offset, params + wpe_info_->offset, grads + wte_info_->offset,
               grads + wpe_info_->offset);
}

void EmbeddingLayer::forward(float* x_out, const int* tokens, int b, int T, float* scratch) const {
  lookup_.forward(x_out, tokens, b, T, scratch);
}

void EmbeddingLayer::backward_weight(const float* dx_out, const int* tokens, int b, int T,
                                     float* scratch) const {
  lookup_.backward_weight(dx_out, tokens, b, T, scratch);
}

}  // namespace mt
