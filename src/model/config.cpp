#include "model/config.h"

#include "core/error.h"

namespace mt {

void ModelConfig::validate() const {
  MT_REQUIRE(layers >= 1, "--layers must be >= 1 (got ", layers, ")");
  MT_REQUIRE(dim >= 1, "--dim must be >= 1 (got ", dim, ")");
  MT_REQUIRE(heads >= 1, "--heads must be >= 1 (got ", heads, ")");
  MT_REQUIRE(seq >= 1, "--seq must be >= 1 (got ", seq, ")");
  MT_REQUIRE(position_rows() >= seq, "--seq ", seq, " is longer than the position table (",
             position_rows(), " rows)");
  MT_REQUIRE(vocab >= 2 && vocab <= kMaxVocab, "--vocab must be in 2..", kMaxVocab, " (got ", vocab,
             ")");
  MT_REQUIRE(dim % heads == 0, "--heads ", heads, " does not divide --dim ", dim,
             " (each head needs dim/heads columns)");
  MT_REQUIRE(experts >= 0, "--experts must be >= 0 (got ", experts, ")");
  if (experts > 0) {
    MT_REQUIRE(topk >= 1 && topk <= experts, "--topk must be in 1..--experts (got ", topk, ")");
    MT_REQUIRE(moe_every >= 1, "--moe-every must be >= 1 (got ", moe_every, ")");
    MT_REQUIRE(capacity_factor >= 0, "--capacity-factor must be >= 0 (got ", capacity_factor, ")");
  }
}

namespace {

// Parameters of one block other than its MLP, and of one dense MLP (= one expert).
int64_t attention_params(int64_t C) {
  return 2 * 2 * C + 3 * C * C + 3 * C + C * C + C;
}
int64_t mlp_params(int64_t C) {
  return 4 * C * C + 4 * C + 4 * C * C + C;
}

}  // namespace

int64_t ModelConfig::moe_layers() const {
  if (experts <= 0) return 0;
  int64_t n = 0;
  for (int i = 0; i < layers; ++i) n += (i + 1) % moe_every == 0;  // as is_moe_layer
  return n;
}

int64_t ModelConfig::num_params() const {
  const int64_t C = dim, moe = moe_layers();
  const int64_t blocks = layers * attention_params(C) + (layers - moe) * mlp_params(C) +
                         moe * (experts * mlp_params(C) + experts * C);  // + router
  return int64_t(vocab) * C + int64_t(position_rows()) * C + blocks + 2 * C;
}

double ModelConfig::flops_per_token() const {
  // Active parameters: a MoE layer runs its router and topk experts per token.
  const int64_t C = dim, moe = moe_layers();
  const int64_t inactive = moe * (experts - topk) * mlp_params(C);
  double n = double(num_params() - inactive - int64_t(position_rows()) * dim);
  return 6.0 * n + 12.0 * layers * seq * dim;
}

std::string ModelConfig::describe() const {
  return str("GPT ", layers, "L ", dim, "d ", heads, "h seq ", seq, " vocab ", vocab, " (",
             num_params() / 1e6, "M params)");
}

}  // namespace mt
