// Memory per GPU as the training software itself keeps it (software field paper_memory):
// the GPU software a plan is for is not this engine, so its footprint is not this engine's
// estimate but what the software's design holds, from the papers that describe it.
//
// Activations: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models"), Section 4 and Table 2, per layer and microbatch, 16-bit activations
// (e bytes), 1-byte dropout masks, s tokens, b sequences, width h, a heads, tp t:
//   no parallelism                 sbh (34 + 5as/h)
//   tensor parallel                sbh (10 + 24/t + 5as/(ht))
//   tensor + sequence parallel     sbh (34/t + 5as/(ht))
//   tp + selective recomputation   sbh (10 + 24/t)
//   tp + sp + selective            sbh (34/t)
//   full recomputation             2 sbh (the layer's input; /t under sp)
// itemised as the paper does (attention: its input 2sbh, Q and K 4sbh, the softmax 2as^2b,
// its dropout mask as^2b and output 2as^2b, V 2sbh, the projection's input 2sbh and its
// dropout mask sbh; MLP: its input 2sbh, the GELU's input and output 8sbh each, the mask
// sbh; two LayerNorm inputs 4sbh), so the same items give the Llama block: Q 2sbq, K and V
// 2sbkv each (grouped-query attention), SwiGLU's gate|up 4sbF and product 2sbF, no dropout,
// and under FlashAttention no s x s tensors, only the softmax statistics (4 bytes per head
// and token). Context parallelism keeps s/cp tokens per rank. DeepSeek-V3's software
// (report 3.2.3, 3.3.3) changes three items: a Linear's cached input in FP8 (1 byte and a
// scale per 128), the MoE SwiGLU's input in FP8 without its product, and with the norms and
// up-projections recomputed neither norm output nor Q, K, V (their input kept, h wide).
// A stage holds its chunks' layers for every microbatch in flight: the schedule's own
// action list decides (F holds a microbatch's activations until its B, or W when the
// backward is split), which is the paper's first stage under 1F1B (p microbatches of L/p
// layers: L layers) and under interleaving (L (1 + (p-1)/(pv))); Megatron-LM's
// theoretical_memory_usage.py computes the same. The first stage adds the token ids and the
// embedding's dropout mask per microbatch, the last the final norm and the logits (fp32 when
// the software casts them). Full recomputation adds one layer's whole activations, the layer
// being recomputed in backward.
//
// Model state per parameter on the rank (16-bit training): weights 2 bytes, gradients
// grad_reduce_bytes (fp16 2 in 2021, fp32 4 since), the fp32 master copy and Adam's two
// moments 12; ZeRO 1 shards the 12 over dp x cp (Megatron's distributed optimizer: 6 + 12/d
// bytes), ZeRO 2 the gradients too, ZeRO 3 the weights too (plus two layers' gathered
// 16-bit weights). fp32 (TF32) training: 4 + 4 + 8. The device reserve (CUDA context,
// library workspaces) is subtracted from the capacity in usable_bytes_per_rank.
#pragma once

#include <vector>

#include "plan/memory_model.h"

namespace mt::plan {

// The activation bytes one layer keeps for one microbatch on one rank, as the layout
// stores them (full recomputation: the layer's input only); `whole`: every activation of
// the layer as if not recomputed (full recomputation's working layer); `moe`: a MoE layer
// (its experts keep their items for each of a token's topk rows, unsplit by tp).
double layer_activation_bytes(const PlanRequest& r, const Layout& l, bool whole = false,
                              bool moe = false);

// Layer-microbatches of activations a stage holds at its peak, for chunks of the given
// blocks each (its actions in order: F takes a microbatch's slot of its chunk, B, or W when
// the backward is split, frees it); without pp (no actions) one microbatch of chunk 0.
double stage_peak(const Schedule& s, int stage, const std::vector<double>& per_chunk);

// The largest stage's memory per GPU.
PlannedMemory software_memory(const PlanRequest& r, const Layout& l, const Schedule& schedule);

}  // namespace mt::plan
