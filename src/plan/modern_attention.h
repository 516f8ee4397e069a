// The attention families the planner describes (plan --attention): multi-head attention
// with grouped-query heads (the engine's GPT and Llama blocks) and multi-head latent
// attention (MLA: DeepSeek-V2/V3, "DeepSeek-V3 Technical Report" 2.1.1, and its released
// config's q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim).
//
// MLA as it trains (no weight absorption; Megatron-Core's MLASelfAttention): per token
//   c_q = W_qa x (h -> q_lora), RMSNorm, q = W_qb c_q (q_lora -> heads x (nope + rope));
//   [c_kv, k_pe] = W_kva x (h -> kv_lora + rope), RMSNorm on c_kv,
//   [k_nope, v] = W_kvb c_kv (kv_lora -> heads x (nope + v)), k = [k_nope, k_pe shared];
//   the core: scores over qk = nope + rope wide heads, values v wide; out = W_o (heads v -> h).
// q_lora_rank 0 (DeepSeek-V2-Lite) is q = W_q x directly (h -> heads x (nope + rope)).
// Under tensor parallelism the down-projections (W_qa, W_kva) and their norms are replicated
// (Megatron-Core builds them as duplicated linears), the up-projections are column-parallel
// and W_o row-parallel.
#pragma once

#include <string>
#include <vector>

namespace mt::plan {

enum class AttentionFamily { mha, mla };

struct MlaShape {  // DeepSeek-V3's released config unless the flags say otherwise
  int q_lora_rank = 1536, kv_lora_rank = 512;
  int qk_nope_head_dim = 128, qk_rope_head_dim = 64, v_head_dim = 128;
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

struct AttentionShape {
  AttentionFamily family = AttentionFamily::mha;
  MlaShape mla;
  bool is_mla() const { return family == AttentionFamily::mla; }
};

// One projection of the attention: `in` -> `out` features; split over tp (column-parallel:
// out / t; row-parallel: in / t) or replicated on every tp rank.
enum class ProjectionSplit { column, row, replicated };
struct Projection {
  double in = 0, out = 0;
  ProjectionSplit split = ProjectionSplit::column;
  bool up = false;  // MLA's up-projections (and MHA's q/k/v): DeepSeek-V3 recomputes them (3.2.3)
  double rank_in(double t) const { return split == ProjectionSplit::row ? in / t : in; }
  double rank_out(double t) const { return split == ProjectionSplit::column ? out / t : out; }
  double rank_weights(double t) const { return rank_in(t) * rank_out(t); }
};

// The attention's widths as the cost and memory models read them (model_flops.h BlockWidths
// holds one): the core's query and key width (heads x qk head), its value width, the
// projections in order, the latent RMSNorms' widths (MLA; replicated over tp).
struct AttentionWidths {
  AttentionShape shape;
  double heads = 0, kv_heads = 0, qk_head = 0, v_head = 0;
  std::vector<Projection> projections;
  double latent_norms = 0;  // MLA: q_lora + kv_lora RMSNorm weights (and rows per token)
  double latent_cache =
      0;                   // MLA: the down-projections' outputs per token (q_lora + kv_lora + rope)
  double rope_width = 0;   // per token: the features RoPE rotates that tp splits (q and k heads)
  double rope_shared = 0;  // per token: those on every tp rank (MLA's shared k_pe)
  double q() const { return heads * qk_head; }     // query width (all heads)
  double k() const { return kv_heads * qk_head; }  // key width, after any up-projection
  double v() const { return kv_heads * v_head; }   // value width, after any up-projection
  double o() const { return heads * v_head; }      // the output projection's input
  double weights(double t) const;                  // the projections' weights on a tp rank
  double up_weights(double t) const;               // of them, the recomputed up-projections
  // Forward FLOPs of one token against `keys` keys (full, not causally halved: the
  // Korthikanti / PaLM convention of model_flops.h): 2 per weight, 2 keys (qk + v) per head.
  double forward_flops_per_token(double keys) const;
};

// h wide, `heads` query heads and `kv_heads` key/value heads of `head_dim` (MHA/GQA: one
// q|k|v projection and the output), or MLA of `shape.mla` (kv_heads = heads).
AttentionWidths attention_widths(const AttentionShape& shape, double h, double heads,
                                 double kv_heads, double head_dim);

// --explain's line for the family (MLA: its widths and what is replicated over tp).
std::string attention_assumption(const AttentionShape& a);

// --attention's value: "mha" or "mla"; UsageError naming the flag otherwise.
AttentionFamily attention_family_of(const std::string& name);

// "" for MHA, " MLA q_lora 1536 kv_lora 512 qk 128+64 v 128" for MLA (the model's summary line).
std::string describe_attention(const AttentionShape& a);

// UsageError (one line naming the flag) unless every MLA width is in 1..2^20 (q_lora_rank
// may be 0: no query compression).
void validate_attention(const AttentionShape& a);

}  // namespace mt::plan
