#include "model/gpt.h"

#include "core/error.h"

namespace mt {

GPT::GPT(const ModelConfig& cfg, const std::vector<ChunkSpec>& chunks,
         const TensorParallelShard& tp, int max_b, const ExpertParallelShard& ep,
         Recompute recompute, Precision precision, const ContextParallelShard& cp)
    : cfg_(cfg), precision_(precision) {
  cfg.validate();
  const uint64_t* bf16_version = precision == Precision::bf16 ? weights_version_.get() : nullptr;
  // A tied head in a later chunk than the embedding's: one edge unit for both (gpt.h).
  std::vector<ChunkSpec> specs = chunks;
  edge_chunk_ = share_tied_edge(cfg, specs);
  for (const ChunkSpec& spec : specs)
    chunks_.push_back(std::make_unique<ModelChunk>(cfg, spec, tp, max_b, table_, ep, recompute,
                                                   bf16_version, nullptr, cp));
  params_.resize(table_.total());
  grads_.resize(table_.total());
  for (auto& c : chunks_) c->bind(params_.data(), grads_.data());
}

std::vector<MoeLayer*> GPT::moe_layers() {
  std::vector<MoeLayer*> out;
  for (auto& c : chunks_)
    for (MoeLayer* m : c->moe_layers()) out.push_back(m);
  return out;
}

void GPT::release_arenas() {
  params_.release();
  grads_.release();
}

void GPT::restore_arenas() {
  params_.resize(table_.total());
  grads_.resize(table_.total());
  for (auto& c : chunks_) c->bind(params_.data(), grads_.data());
}

std::vector<ChunkSpec> GPT::whole_model(const ModelConfig& cfg) {
  return {ChunkSpec{0, cfg.layers, true, true}};
}

double GPT::train_microbatch(const int* tokens, const int* targets, int b, int T, float dloss) {
  MT_CHECK(chunks_.size() == 1 && chunks_[0]->spec().has_embedding && chunks_[0]->spec().has_head);
  ModelChunk& c = *chunks_[0];
  int slot = c.pool().acquire();
  c.dropout().set_microbatch(slot, dropout_microbatch_, b, T);
  double loss = c.forward(slot, tokens, targets, b, T, dloss);
  c.backward(slot, b, T);
  c.pool().release(slot);
  return loss;
}

double GPT::eval_microbatch(const int* tokens, const int* targets, int b, int T) {
  MT_CHECK(chunks_.size() == 1 && chunks_[0]->spec().has_embedding && chunks_[0]->spec().has_head);
  ModelChunk& c = *chunks_[0];
  int slot = c.pool().acquire();
  double loss = c.forward(slot, tokens, targets, b, T, 0.f);
  c.pool().release(slot);
  return loss;
}

void GPT::set_dropout(uint64_t seed, int64_t first_sequence) {
  for (auto& c : chunks_) c->dropout().configure(seed, first_sequence);
}

void GPT::set_dropout_step(uint64_t step) {
  for (auto& c : chunks_) c->dropout().set_step(step);
}

size_t GPT::bf16_weight_bytes() const {
  size_t total = 0;
  for (const auto& c : chunks_) total += c->bf16_weight_bytes();
  return total;
}

std::vector<Bf16CopyTarget> GPT::bf16_copies() const {
  std::vector<Bf16CopyTarget> out;
  for (const auto& c : chunks_) c->bf16_copies(out);
  return out;
}

size_t GPT::activation_peak_bytes() const {
  size_t total = 0;
  for (const auto& c : chunks_) total += c->pool().peak_bytes();
  return total;
}

}  // namespace mt
