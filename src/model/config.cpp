#include "model/config.h"

#include <cmath>

#include "core/error.h"

namespace mt {

bool parse_arch(const std::string& s, Arch* out) {
  if (s == "gpt2") {
    *out = Arch::gpt2;
  } else if (s == "llama") {
    *out = Arch::llama;
  } else {
    return false;
  }
  return true;
}

const char* arch_name(Arch a) {
  return a == Arch::llama ? "llama" : "gpt2";
}

int ModelConfig::hidden() const {
  if (!llama()) return 4 * dim;
  if (ffn_dim > 0) return ffn_dim;
  // Llama's rounding of 8C/3 up to a multiple of 256 (§9), in integers: ceil(8C / 768) * 256.
  return int((8 * int64_t(dim) + 767) / 768 * 256);
}

int ModelConfig::expert_hidden() const {
  if (!llama()) return 4 * dim;
  return expert_ffn_dim > 0 ? expert_ffn_dim : hidden();
}

const char* ModelConfig::token_table_name() const {
  return llama() ? "model.embed_tokens.weight" : "transformer.wte.weight";
}

const char* ModelConfig::head_weight_name() const {
  return tied() ? token_table_name() : "lm_head.weight";
}

namespace {

// The Llama-only knobs keep their defaults under --arch gpt2 (§9: gpt2 is sections 1 and 4
// unchanged), so a flag meant for llama is never silently ignored.
void validate_gpt2_only(const ModelConfig& c) {
  const char* why = " is a --arch llama setting; the gpt2 block has none (add --arch llama)";
  MT_REQUIRE(c.kv_heads == 0 || c.kv_heads == c.heads, "--kv-heads ", c.kv_heads, why);
  MT_REQUIRE(c.head_size == 0 || c.head_size * c.heads == c.dim, "--head-dim ", c.head_size, why);
  MT_REQUIRE(c.ffn_dim == 0 || c.ffn_dim == 4 * c.dim, "--ffn-dim ", c.ffn_dim, why);
  MT_REQUIRE(c.rope_theta == 500000.0, "--rope-theta", why);
  MT_REQUIRE(c.norm_eps == 1e-5f, "--norm-eps", why);
  MT_REQUIRE(!c.rope_scaling.enabled(), "rope_scaling", why);
  // The DeepSeek-V3 MoE knobs (§9): the gpt2 MoE is section 1's (softmax, GELU experts of 4C).
  MT_REQUIRE(c.expert_ffn_dim == 0 || c.expert_ffn_dim == 4 * c.dim, "--expert-ffn-dim ",
             c.expert_ffn_dim, why);
  MT_REQUIRE(c.shared_experts == 0, "--shared-experts ", c.shared_experts, why);
  MT_REQUIRE(c.first_dense_layers == 0, "--first-dense-layers ", c.first_dense_layers, why);
  MT_REQUIRE(c.router == RouterScore::softmax, "--router sigmoid", why);
  MT_REQUIRE(c.routed_scale == 1.0f, "--routed-scale ", c.routed_scale, why);
}

void validate_llama(const ModelConfig& c) {
  MT_REQUIRE(c.kv_heads >= 0, "--kv-heads must be >= 1 (got ", c.kv_heads, ")");
  MT_REQUIRE(c.heads % c.kv() == 0, "--kv-heads ", c.kv(), " does not divide --heads ", c.heads,
             " (each kv head serves heads/kv-heads query heads)");
  if (c.head_size == 0)
    MT_REQUIRE(c.dim % c.heads == 0, "--heads ", c.heads, " does not divide --dim ", c.dim,
               " (or give --head-dim)");
  MT_REQUIRE(c.head_dim() >= 2 && c.head_dim() <= 512 && c.head_dim() % 2 == 0,
             "--head-dim must be even and in 2..512 (RoPE rotates pairs; got ", c.head_dim(), ")");
  MT_REQUIRE(c.ffn_dim >= 0, "--ffn-dim must be >= 1 (got ", c.ffn_dim, ")");
  MT_REQUIRE(std::isfinite(c.rope_theta) && c.rope_theta > 1.0,
             "--rope-theta must be a finite number > 1 (got ", c.rope_theta, ")");
  MT_REQUIRE(std::isfinite(c.norm_eps) && c.norm_eps > 0,
             "--norm-eps must be a finite number > 0 (got ", c.norm_eps, ")");
  MT_REQUIRE(c.expert_ffn_dim >= 0, "--expert-ffn-dim must be >= 1 (got ", c.expert_ffn_dim, ")");
  MT_REQUIRE(c.shared_experts >= 0, "--shared-experts must be >= 0 (got ", c.shared_experts, ")");
  MT_REQUIRE(c.first_dense_layers >= 0, "--first-dense-layers must be >= 0 (got ",
             c.first_dense_layers, ")");
  MT_REQUIRE(std::isfinite(c.routed_scale) && c.routed_scale > 0,
             "--routed-scale must be a finite number > 0 (got ", c.routed_scale, ")");
}

}  // namespace

void ModelConfig::validate() const {
  MT_REQUIRE(layers >= 1, "--layers must be >= 1 (got ", layers, ")");
  MT_REQUIRE(dim >= 1, "--dim must be >= 1 (got ", dim, ")");
  MT_REQUIRE(heads >= 1, "--heads must be >= 1 (got ", heads, ")");
  MT_REQUIRE(seq >= 1, "--seq must be >= 1 (got ", seq, ")");
  MT_REQUIRE(position_rows() >= seq, "--seq ", seq, " is longer than the position table (",
             position_rows(), " rows)");
  MT_REQUIRE(vocab >= 2 && vocab <= kMaxVocab, "--vocab must be in 2..", kMaxVocab, " (got ", vocab,
             ")");
  if (llama()) {
    validate_llama(*this);
  } else {
    MT_REQUIRE(dim % heads == 0, "--heads ", heads, " does not divide --dim ", dim,
               " (each head needs dim/heads columns)");
    validate_gpt2_only(*this);
  }
  MT_REQUIRE(experts >= 0, "--experts must be >= 0 (got ", experts, ")");
  if (experts > 0) {
    MT_REQUIRE(topk >= 1 && topk <= experts, "--topk must be in 1..--experts (got ", topk, ")");
    MT_REQUIRE(moe_every >= 1, "--moe-every must be >= 1 (got ", moe_every, ")");
    MT_REQUIRE(capacity_factor >= 0, "--capacity-factor must be >= 0 (got ", capacity_factor, ")");
  }
}

namespace {

// Parameters of one block other than its MLP (its norms included), and of one dense MLP
// (= one expert): gpt2 (§4) with biases, llama (§9) with q/k/v/o and SwiGLU's three matrices.
int64_t attention_params(const ModelConfig& c) {
  const int64_t C = c.dim;
  if (!c.llama()) return 2 * 2 * C + 3 * C * C + 3 * C + C * C + C;
  const int64_t q = int64_t(c.heads) * c.head_dim(), kv = int64_t(c.kv()) * c.head_dim();
  return 2 * C + C * q + 2 * C * kv + q * C;
}
int64_t mlp_params(const ModelConfig& c) {
  const int64_t C = c.dim, H = c.hidden();
  if (!c.llama()) return 4 * C * C + 4 * C + 4 * C * C + C;
  return 3 * C * H;
}
// One routed expert (gpt2: the dense MLP; llama: a SwiGLU of width Fe).
int64_t expert_params(const ModelConfig& c) {
  return c.llama() ? 3 * int64_t(c.dim) * c.expert_hidden() : mlp_params(c);
}

}  // namespace

int64_t ModelConfig::moe_layers() const {
  if (experts <= 0) return 0;
  int64_t n = 0;
  for (int i = 0; i < layers; ++i) n += is_moe(i);
  return n;
}

int64_t ModelConfig::num_params() const {
  const int64_t C = dim, moe = moe_layers();
  // An MoE layer: E routed experts, the router [E, C] and (llama) the shared experts.
  const int64_t shared = 3 * C * shared_hidden();
  const int64_t blocks = layers * attention_params(*this) + (layers - moe) * mlp_params(*this) +
                         moe * (experts * expert_params(*this) + experts * C + shared);
  if (llama())  // embedding, untied head, final RMSNorm
    return int64_t(vocab) * C * (tied() ? 1 : 2) + blocks + C;
  return int64_t(vocab) * C + int64_t(position_rows()) * C + blocks + 2 * C;
}

double ModelConfig::flops_per_token() const {
  // Active parameters: a MoE layer runs its router and topk experts per token.
  const int64_t moe = moe_layers();
  const int64_t inactive = moe * (experts - topk) * expert_params(*this);
  const int64_t positions = llama() ? 0 : int64_t(position_rows()) * dim;
  double n = double(num_params() - inactive - positions);
  const double attention_width = llama() ? double(heads) * head_dim() : double(dim);
  return 6.0 * n + 12.0 * layers * seq * attention_width;
}

std::string ModelConfig::describe() const {
  if (!llama())
    return str("GPT ", layers, "L ", dim, "d ", heads, "h seq ", seq, " vocab ", vocab, " (",
               num_params() / 1e6, "M params)");
  return str("Llama ", layers, "L ", dim, "d ", heads, "h/", kv(), "kv hd ", head_dim(), " ffn ",
             hidden(), " seq ", seq, " vocab ", vocab, tied() ? " tied" : "", " (",
             num_params() / 1e6, "M params)");
}

}  // namespace mt
