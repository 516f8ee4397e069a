// A dry run of the model's constructors: what one rank's chunks hold, read off chunks built
// by the trainer's own code (ModelChunk, as GPT builds them) instead of counted by a second
// account of it. The chunks are built dry (model_chunk.h): their arenas and the MoE
// layers' take sizes without memory (core/arena.h), the bf16 weight copies are made only
// at first use (kernels/bf16_weight.h), nothing is bound, and the blocks are stand-ins,
// one per kind (block_stand_ins.h), so the run costs a few blocks whatever the depth of
// the model. The memory estimate (train/memory_estimate.h) takes its model figures from
// here; a layer added to the chunks is counted as soon as it reserves through the table,
// the slot layout and its arenas.
//
// Every rank of a tp or ep group holds the same sizes (the vocabulary is padded to a
// multiple of tp; each ep rank holds E/ep experts), so the run builds rank 0's.
#pragma once

#include <memory>
#include <vector>

#include "model/block_stand_ins.h"
#include "model/config.h"
#include "model/kernel_target.h"
#include "model/model_chunk.h"
#include "model/precision.h"
#include "model/recompute.h"
#include "model/token_exchange.h"

namespace mt {

struct DryModelShape {
  int tp = 1, ep = 1;
  int moe_overlap_parts = 1;       // --moe-overlap-parts: the MoE layers' part counts in the slot
  bool sequence_parallel = false;  // with tp > 1
  int max_b = 1;                   // the microbatch, in sequences
  Recompute recompute = Recompute::none;
  Precision precision = Precision::fp32;
  KernelTarget target = KernelTarget::this_host;  // whose kernels (model/kernel_target.h)
  ProfileKernels profile;                         // what a profile says of them (profile)
};

// What one rank's chunks hold.
struct RankFootprint {
  std::vector<ChunkFootprint> chunks;  // local chunk order
  size_t tied_embedding_numel = 0;     // transformer.wte.weight on this rank (0: none)
};

class DryModel {
 public:
  // UsageError for a model configuration GPT would refuse (ModelConfig::validate).
  DryModel(const ModelConfig& cfg, const DryModelShape& shape);
  DryModel(const DryModel&) = delete;
  DryModel& operator=(const DryModel&) = delete;
  ~DryModel();

  // The chunks one rank holds (GPT's `chunks`: the whole model, or a pipeline stage's),
  // with one table between them, as GPT's (the tied wte is registered once per rank).
  RankFootprint rank(const std::vector<ChunkSpec>& chunks);

 private:
  ModelConfig cfg_;
  DryModelShape shape_;
  uint64_t bf16_version_ = 0;                // a version to point at under bf16
  std::unique_ptr<TokenExchange> exchange_;  // stands for the ep group (ep > 1)
  BlockStandIns stand_ins_;                  // shared by every rank() call
};

}  // namespace mt
