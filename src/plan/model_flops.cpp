#include "plan/model_flops.h"

#include "core/error.h"

namespace mt::plan {

double korthikanti_flops(double B, double L, double s, double h, double V) {
  return 72.0 * B * L * s * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * h * L));
}

double model_params(const ModelConfig& cfg) {
  const double C = cfg.dim, L = cfg.layers, E = cfg.experts, moe = double(cfg.moe_layers());
  const double attention = 2 * 2 * C + 3 * C * C + 3 * C + C * C + C;
  const double mlp = 4 * C * C + 4 * C + 4 * C * C + C;
  const double blocks = L * attention + (L - moe) * mlp + moe * (E * mlp + E * C);
  return double(cfg.vocab) * C + double(cfg.position_rows()) * C + blocks + 2 * C;
}

std::string describe_model(const ModelConfig& m) {
  return str("GPT ", m.layers, "L ", m.dim, "d ", m.heads, "h seq ", m.seq, " vocab ", m.vocab,
             " (", model_params(m) / 1e6, "M params)");
}

double model_flops_per_step(const ModelConfig& cfg, int batch) {
  const double B = batch, s = cfg.seq, h = cfg.dim, V = cfg.vocab, E = cfg.experts;
  const double moe = double(cfg.moe_layers()), dense = double(cfg.layers) - moe;
  const double attention = 8 * h * h + 4 * s * h;  // qkv 6h^2 + proj 2h^2 + scores/values
  const double mlp = 16 * h * h;
  const double per_token_forward =
      dense * (attention + mlp) + moe * (attention + 2 * h * E + cfg.topk * mlp) + 2 * h * V;
  return 3.0 * B * s * per_token_forward;
}

}  // namespace mt::plan
