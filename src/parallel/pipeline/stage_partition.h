// Which transformer blocks each pipeline chunk holds. The model is cut into p*v contiguous
// model chunks (chunk k runs on stage k % p, see schedule.h); chunk 0 also holds the token
// and position embeddings, the last chunk also holds ln_f, the tied LM head and the loss.
//
// Cost model (forward FLOPs per token; backward is ~2x forward for every part, so the
// ratios hold for a whole training step):
//   block:     2*(3C*C + C*C + 4C*C + 4C*C) = 24 C^2 for the matmuls (qkv, attention
//              projection, MLP up and down) + 4 T C for q k^T and att v (counted in full)
//   head:      2 C V for the logits matmul; ln_f and the cross-entropy are O(C + V), dropped
//   embedding: a row gather, O(C): counted as 0
// so in units of one block: head = V / (12 C + 2 T), embedding = 0.
// A GPT-2-small head (V 50257, C 768, T 1024) costs ~4.5 blocks, so the last chunk should
// get few or no blocks; ignoring it would make the last stage the pipeline's bottleneck.
#pragma once

#include <string>
#include <vector>

namespace mt {

struct PartitionCost {
  double block = 1;      // every transformer block (the unit)
  double embedding = 0;  // extra on the first chunk
  double head = 0;       // extra on the last chunk
};

PartitionCost partition_cost_model(int dim, int seq, int vocab);

// Blocks per model chunk (size `chunks`, sum `layers`, each >= 0) minimising the most
// expensive chunk; among those, layers are taken off the most expensive chunks first and,
// on ties, off the earlier ones, because under 1F1B early stages hold the most in-flight
// microbatches (more activation memory per block). UsageError if layers < 0 or chunks < 1.
std::vector<int> partition_layers(int layers, int chunks, const PartitionCost& cost);

// The `--stage-layers 3,4,4,3` override: one count per model chunk (pp * virtual stages),
// each >= 0, summing to --layers. UsageError naming --stage-layers otherwise.
std::vector<int> parse_stage_layers(const std::string& spec, int layers, int chunks);

// Index of the first block of every chunk plus a final entry == layers, so chunk k holds
// blocks [offsets[k], offsets[k+1]).
std::vector<int> chunk_layer_offsets(const std::vector<int>& layers_per_chunk);

}  // namespace mt
