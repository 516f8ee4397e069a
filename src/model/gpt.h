// The model as one rank holds it: the parameter table, the three arenas it describes
// (parameters, gradients; optimizer moments live with the optimizer), and the chunks of
// layers this rank runs. One worker holds a single chunk with every layer.
#pragma once

#include <memory>
#include <vector>

#include "core/arena.h"
#include "model/model_chunk.h"
#include "model/param_table.h"
#include "model/precision.h"

namespace mt {

class GPT {
 public:
  // max_b: the largest microbatch (in sequences) a forward will see.
  GPT(const ModelConfig& cfg, const std::vector<ChunkSpec>& chunks, const TensorParallelShard& tp,
      int max_b, const ExpertParallelShard& ep = {}, Recompute recompute = Recompute::none,
      Precision precision = Precision::fp32, const ContextParallelShard& cp = {});
  // The whole model in one chunk (one worker, or pure data parallelism).
  static std::vector<ChunkSpec> whole_model(const ModelConfig& cfg);

  const ModelConfig& config() const { return cfg_; }
  const ParamTable& table() const { return table_; }
  Arena& params() { return params_; }
  Arena& grads() { return grads_; }
  ModelChunk& chunk(int i) { return *chunks_[i]; }
  int num_chunks() const { return int(chunks_.size()); }
  // The chunk whose edge unit (ChunkHooks: unit 0) holds chunk c's edge tensors: c itself,
  // except for a tied head in a later chunk than this rank's embedding (DualPipeV's stage
  // 0), whose tensors are the embedding chunk's (ChunkSpec::edge_holds_head).
  int edge_chunk(int c) const { return edge_chunk_[size_t(c)]; }
  // Every mixture-of-experts layer this rank holds, in layer order.
  std::vector<MoeLayer*> moe_layers();

  // Deterministic init (docs/contracts.md §1), a function of (seed, name, element) only.
  void init(uint64_t seed) { table_.init(params_.data(), seed); }
  void zero_grads() { grads_.zero(); }
  // A data-parallel engine that keeps parameters and gradients in its own (sharded)
  // storage frees the model's arenas and binds the chunks itself...
  void release_arenas();
  // ...and gives them back (full size, zeroed, every chunk bound to them) at the end.
  void restore_arenas();

  // Single-chunk conveniences: forward + the fused backward (ModelChunk::backward) of one
  // microbatch, returning
  // the summed token loss; gradients accumulate (+=) into grads().
  double train_microbatch(const int* tokens, const int* targets, int b, int T, float dloss);
  double eval_microbatch(const int* tokens, const int* targets, int b, int T);

  // --dropout (model/chunk_dropout.h): once per run, the seed and this rank's first sequence
  // of each global batch; each step its number; before train_microbatch, the microbatch's
  // index within the step (pipelines tell each chunk per slot themselves).
  void set_dropout(uint64_t seed, int64_t first_sequence);
  void set_dropout_step(uint64_t step);
  void set_dropout_microbatch(int j) { dropout_microbatch_ = j; }

  // --precision bf16: the linears' bf16 weight copies are converted again at their next use.
  // Call after the weights may have changed (an optimizer step, a load) and before running
  // the model; train_step, evaluate and the tests that drive the model directly do.
  void weights_changed() { ++*weights_version_; }
  // --cp > 1: every chunk's ring reports its steps to `sink` (empty: to nowhere).
  void set_span_sink(const CpSpanSink& sink) {
    for (auto& c : chunks_) c->set_span_sink(sink);
  }
  Precision precision() const { return precision_; }
  size_t bf16_weight_bytes() const;
  // The dense linears' bf16 weight copies of every chunk, with their bound weights
  // (kernels/bf16_weight.h); empty under fp32.
  std::vector<Bf16CopyTarget> bf16_copies() const;

  // Peak bytes of activation slots over all chunks.
  size_t activation_peak_bytes() const;

 private:
  ModelConfig cfg_;
  Precision precision_;
  // Heap-held so the layers' pointer to it survives a move of the GPT.
  std::unique_ptr<uint64_t> weights_version_ = std::make_unique<uint64_t>(0);
  ParamTable table_;
  std::vector<std::unique_ptr<ModelChunk>> chunks_;
  std::vector<int> edge_chunk_;
  Arena params_, grads_;
  int dropout_microbatch_ = 0;
};

}  // namespace mt
