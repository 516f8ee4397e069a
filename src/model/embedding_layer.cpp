#include "model/embedding_layer.h"

#include "kernels/embedding.h"

namespace mt {

EmbeddingLayer::EmbeddingLayer(const ModelConfig& cfg, ParamTable& table)
    : C_(cfg.dim), V_(cfg.vocab) {
  const ParamInfo* wte = table.find("transformer.wte.weight");
  wte_info_ = wte ? wte : &table.add("transformer.wte.weight", {V_, C_}, InitKind::normal);
  wpe_info_ = &table.add("transformer.wpe.weight", {cfg.position_rows(), C_}, InitKind::normal);
}

void EmbeddingLayer::bind(float* params, float* grads) {
  wte_ = params + wte_info_->offset;
  wpe_ = params + wpe_info_->offset;
  dwte_ = grads + wte_info_->offset;
  dwpe_ = grads + wpe_info_->offset;
}

void EmbeddingLayer::forward(float* x_out, const int* tokens, int b, int T) const {
  embedding_forward(x_out, tokens, wte_, wpe_, b, T, C_, 0, V_);
}

void EmbeddingLayer::backward_weight(const float* dx_out, const int* tokens, int b, int T) const {
  embedding_backward(dwte_, dwpe_, dx_out, tokens, b, T, C_, 0, V_);
}

}  // namespace mt
