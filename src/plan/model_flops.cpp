#include "plan/model_flops.h"

namespace mt::plan {

double korthikanti_flops(double B, double L, double s, double h, double V) {
  return 72.0 * B * L * s * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * h * L));
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
