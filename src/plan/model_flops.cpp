#include "plan/model_flops.h"

#include "core/error.h"
#include "model/block.h"

namespace mt::plan {

BlockWidths block_widths(const ModelConfig& m, const AttentionShape& a) {
  BlockWidths w;
  w.h = m.dim;
  w.att = attention_widths(a, m.dim, m.heads, m.kv(), m.head_dim());
  w.q = w.att.q(), w.kv = w.att.k(), w.v = w.att.v(), w.o = w.att.o();
  w.ffn = m.hidden();
  w.gated = m.llama();
  w.biases = !m.llama();
  w.expert_ffn = m.expert_hidden();
  w.shared_ffn = m.shared_hidden();
  return w;
}

double rank_block_params(const ModelConfig& m, int layer, int tp, int ep, double* experts,
                         const AttentionShape& a) {
  const BlockWidths w = block_widths(m, a);
  const double h = m.dim, t = tp, b = w.biases ? 1 : 0, norm = w.biases ? 2 * h : h;
  const double mlp = w.mlp_matrices() * h * w.ffn;
  double p = 2 * norm + w.att.weights(t) + w.att.latent_norms + b * ((w.q + 2 * w.kv) / t + h);
  if (is_moe_layer(m, layer)) {
    // The rank's E/ep routed experts whole (tokens split over tp, docs/moe.md), the router,
    // and the shared experts split over tp.
    const double ex = double(m.experts) / ep * (w.expert_mlp() + b * (w.expert_ffn + h));
    *experts += ex;
    p += m.experts * h + ex + w.shared_mlp() / t;
  } else {
    p += mlp / t + b * (w.ffn / t + h);
  }
  return p;
}

double korthikanti_flops(double B, double L, double s, double h, double V) {
  return 72.0 * B * L * s * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * h * L));
}

double model_params(const ModelConfig& cfg, const AttentionShape& a) {
  const BlockWidths w = block_widths(cfg, a);
  const double C = cfg.dim, L = cfg.layers, E = cfg.experts, moe = double(cfg.moe_layers());
  const double b = w.biases ? 1 : 0, norm = w.biases ? 2 * C : C;
  const double attention =
      2 * norm + w.att.weights(1) + w.att.latent_norms + b * (w.q + 2 * w.kv + C);
  const double mlp = w.mlp_matrices() * C * w.ffn + b * (w.ffn + C);
  const double expert = w.expert_mlp() + b * (w.expert_ffn + C);
  const double blocks =
      L * attention + (L - moe) * mlp + moe * (E * expert + E * C + w.shared_mlp());
  const double tables = double(cfg.vocab) * C * (cfg.tied() ? 1 : 2);
  return tables + double(cfg.llama() ? 0 : cfg.position_rows()) * C + blocks + norm;
}

std::string describe_model(const ModelConfig& m, const AttentionShape& a) {
  const std::string params =
      str(describe_attention(a), " (", model_params(m, a) / 1e6, "M params)");
  if (!m.llama())
    return str("GPT ", m.layers, "L ", m.dim, "d ", m.heads, "h seq ", m.seq, " vocab ", m.vocab,
               params);
  // MLA's heads are its own widths (describe_attention), not --kv-heads x --head-dim.
  const std::string heads =
      a.is_mla() ? str(m.heads, "h") : str(m.heads, "h/", m.kv(), "kv hd ", m.head_dim());
  return str("Llama ", m.layers, "L ", m.dim, "d ", heads, " ffn ", m.hidden(), " seq ", m.seq,
             " vocab ", m.vocab, m.tied() ? " tied" : "", params);
}

double model_flops_per_step(const ModelConfig& cfg, int batch, const AttentionShape& a) {
  const BlockWidths w = block_widths(cfg, a);
  const double B = batch, s = cfg.seq, h = cfg.dim, V = cfg.vocab, E = cfg.experts;
  const double moe = double(cfg.moe_layers()), dense = double(cfg.layers) - moe;
  // Per token, forward: the attention's projections, then QK^T and PV over s keys.
  const double attention = w.att.forward_flops_per_token(s);
  const double mlp = 2 * w.mlp_matrices() * h * w.ffn;
  // An MoE layer: the router, topk routed experts and the shared experts.
  const double moe_mlp = 2 * h * E + cfg.topk * 2 * w.expert_mlp() + 2 * w.shared_mlp();
  const double per_token_forward =
      dense * (attention + mlp) + moe * (attention + moe_mlp) + 2 * h * V;
  return 3.0 * B * s * per_token_forward;
}

}  // namespace mt::plan
