#include "plan/modern_attention.h"

#include "core/error.h"

namespace mt::plan {

double AttentionWidths::weights(double t) const {
  double p = 0;
  for (const Projection& x : projections) p += x.rank_weights(t);
  return p;
}

double AttentionWidths::up_weights(double t) const {
  double p = 0;
  for (const Projection& x : projections)
    if (x.up) p += x.rank_weights(t);
  return p;
}

double AttentionWidths::forward_flops_per_token(double keys) const {
  return 2 * weights(1) + 2 * keys * heads * (qk_head + v_head);
}

namespace {

AttentionWidths mha(double h, double heads, double kv_heads, double head_dim) {
  AttentionWidths w;
  w.heads = heads, w.kv_heads = kv_heads, w.qk_head = head_dim, w.v_head = head_dim;
  const double qkv = (heads + 2 * kv_heads) * head_dim;
  w.projections = {{h, qkv, ProjectionSplit::column, true},
                   {heads * head_dim, h, ProjectionSplit::row, false}};
  w.rope_width = (heads + kv_heads) * head_dim;
  return w;
}

// The projections of MLA in the order they run (modern_attention.h); the latent RMSNorms'
// weights and the per-token latents the down-projections write.
AttentionWidths mla(const MlaShape& m, double h, double heads) {
  AttentionWidths w;
  w.heads = heads, w.kv_heads = heads, w.qk_head = m.qk_head_dim(), w.v_head = m.v_head_dim;
  const double ql = m.q_lora_rank, kl = m.kv_lora_rank, rope = m.qk_rope_head_dim;
  const double q = heads * m.qk_head_dim(), kv_up = heads * (m.qk_nope_head_dim + m.v_head_dim);
  using S = ProjectionSplit;
  if (ql > 0) {
    w.projections.push_back({h, ql, S::replicated, false});
    w.projections.push_back({ql, q, S::column, true});
  } else {
    w.projections.push_back({h, q, S::column, false});
  }
  w.projections.push_back({h, kl + rope, S::replicated, false});
  w.projections.push_back({kl, kv_up, S::column, true});
  w.projections.push_back({heads * m.v_head_dim, h, S::row, false});
  w.latent_norms = ql + kl;
  w.latent_cache = ql + kl + rope;
  // RoPE on each query head's rope part (split over tp) and the one shared k_pe.
  w.rope_width = heads * rope;
  w.rope_shared = rope;
  return w;
}

}  // namespace

AttentionWidths attention_widths(const AttentionShape& shape, double h, double heads,
                                 double kv_heads, double head_dim) {
  AttentionWidths w = shape.is_mla() ? mla(shape.mla, h, heads) : mha(h, heads, kv_heads, head_dim);
  w.shape = shape;
  return w;
}

AttentionFamily attention_family_of(const std::string& name) {
  MT_REQUIRE(name == "mha" || name == "mla", "--attention must be mha or mla (got '", name, "')");
  return name == "mla" ? AttentionFamily::mla : AttentionFamily::mha;
}

std::string describe_attention(const AttentionShape& a) {
  if (!a.is_mla()) return "";
  const MlaShape& m = a.mla;
  return str(" MLA q_lora ", m.q_lora_rank, " kv_lora ", m.kv_lora_rank, " qk ", m.qk_nope_head_dim,
             "+", m.qk_rope_head_dim, " v ", m.v_head_dim);
}

std::string attention_assumption(const AttentionShape& a) {
  if (!a.is_mla()) return "";
  const MlaShape& m = a.mla;
  return str("attention: MLA (DeepSeek-V3 report 2.1.1) as it trains, no weight absorption: ",
             m.q_lora_rank > 0 ? str("W_qa h -> ", m.q_lora_rank, " and its RMSNorm, W_qb -> ")
                               : std::string("W_q h -> "),
             "heads x ", m.qk_head_dim(), "; W_kva h -> ", m.kv_lora_rank, " + ",
             m.qk_rope_head_dim, " and its RMSNorm, W_kvb -> heads x (", m.qk_nope_head_dim, " + ",
             m.v_head_dim, "); W_o heads x ", m.v_head_dim, " -> h; the core's scores over ",
             m.qk_head_dim(), "-wide heads and values ", m.v_head_dim,
             " wide; down-projections and latent norms whole on every tp rank (on all of "
             "the microbatch's rows), up-projections column- and W_o row-parallel; the "
             "latents (the down-projections' outputs) kept for backward, Q/K/V unless the "
             "up-projections are recomputed");
}

void validate_attention(const AttentionShape& a) {
  constexpr int kMax = 1 << 20;
  const MlaShape& m = a.mla;
  auto in_range = [&](const char* flag, int v, int lo) {
    MT_REQUIRE(v >= lo && v <= kMax, flag, " must be in ", lo, "..", kMax, " (got ", v, ")");
  };
  in_range("--q-lora-rank", m.q_lora_rank, 0);
  in_range("--kv-lora-rank", m.kv_lora_rank, 1);
  in_range("--qk-nope-head-dim", m.qk_nope_head_dim, 0);
  in_range("--qk-rope-head-dim", m.qk_rope_head_dim, 0);
  in_range("--v-head-dim", m.v_head_dim, 1);
  MT_REQUIRE(m.qk_head_dim() >= 1, "--qk-nope-head-dim + --qk-rope-head-dim must be >= 1");
}

}  // namespace mt::plan
