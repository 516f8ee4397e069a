// Model FLOPs of one training step, as Korthikanti et al. 2022 ("Reducing Activation
// Recomputation in Large Transformer Models"), Appendix A, count them for a dense GPT:
//   72 * B * L * s * h^2 * (1 + s / (6h) + V / (12 h L))     per iteration,
// i.e. forward 24 B s h^2 + 4 B s^2 h per layer (every GEMM 2 FLOPs per multiply-add,
// the attention score and value GEMMs counted in full, not halved for the causal mask)
// plus 2 B s h V for the logits, times 3 for forward + backward. Recomputation is not
// counted (these are model FLOPs, the numerator of MFU); LayerNorm, softmax, GELU and the
// optimizer are not counted either.
//
// Llama (--arch llama, docs/contracts.md §9), the same count over its shapes: the q/k/v
// projections are h x (q + 2 kv) with q = heads x head_dim and kv = kv_heads x head_dim
// (grouped-query attention), the output projection q x h, the scores and values 4 s q per
// token, SwiGLU's three matrices 6 h F (gate, up, down), the head 2 h V whether tied or not.
// For the GPT block (q = kv = h, F = 4h, two MLP matrices) this is the closed form above.
//
// MLA (plan --attention mla, modern_attention.h): its five projections (the down-projections
// replicated over tp) and a core of qk_head-wide scores and v_head-wide values over s keys,
// 2 s heads (qk + v) FLOPs per token, in the place of MHA's q/k/v, output and 4 s q.
//
// MoE (our extension, same conventions): a MoE layer replaces the MLP's 16 B s h^2 forward
// by the router (2 B s h E) plus topk expert MLPs per token (topk * 16 B s h^2), every
// token counted for all of its topk choices (dropless; tokens a capacity drops would skip
// are still counted, so MFU does not rise when tokens are dropped).
#pragma once

#include <string>

#include "model/config.h"
#include "plan/modern_attention.h"

namespace mt::plan {

// The widths of one block (both architectures), as the cost and memory models read them.
struct BlockWidths {
  // model, query, key and value (each, after MLA's up-projection), MLP widths; the output
  // projection's input o (heads x v head)
  double h = 0, q = 0, kv = 0, v = 0, o = 0, ffn = 0;
  AttentionWidths att;  // the attention family's projections and core
  // An MoE layer's routed experts' hidden width (gpt2: 4h; llama: --expert-ffn-dim) and its
  // shared experts' SwiGLU width S x Fe (0: none), split over tp as the dense MLP.
  double expert_ffn = 0, shared_ffn = 0;
  bool gated = false;  // SwiGLU: gate and up (2F wide), then down
  bool biases = true;  // the GPT block's linears have biases, Llama's none
  double mlp_matrices() const { return gated ? 3 : 2; }
  double expert_mlp() const { return mlp_matrices() * h * expert_ffn; }  // one expert's weights
  double shared_mlp() const { return 3 * h * shared_ffn; }
};
// `a`: the attention family (plan --attention; MHA, the engine's, by default).
BlockWidths block_widths(const ModelConfig& m, const AttentionShape& a = {});

// Parameters of block `layer` on one rank: its matrices split over tp (the experts' E/ep
// whole; MLA's down-projections whole), norms, router and row-parallel biases replicated;
// the experts' part also added to *experts.
double rank_block_params(const ModelConfig& m, int layer, int tp, int ep, double* experts,
                         const AttentionShape& a = {});

// FLOPs of one optimizer step over `batch` sequences of cfg.seq tokens.
double model_flops_per_step(const ModelConfig& cfg, int batch, const AttentionShape& a = {});

// The model's parameters as ModelConfig::num_params counts them (MHA), in floating point: a
// model the planner accepts may have more than 2^63 of them (split over a billion devices).
double model_params(const ModelConfig& cfg, const AttentionShape& a = {});

// "GPT 4L 64d 4h seq 32 vocab 256 (0.218496M params)", as ModelConfig::describe prints it
// (MLA: its widths after the heads).
std::string describe_model(const ModelConfig& cfg, const AttentionShape& a = {});

// The closed form above for a dense model (the tests check the general count against it).
double korthikanti_flops(double B, double L, double s, double h, double V);

}  // namespace mt::plan
