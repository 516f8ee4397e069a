#include "model/lm_head.h"

#include <type_traits>

#include "model/embedding_layer.h"
#include "model/precision_ops.h"
#include "tensor_parallel/vocab_parallel_cross_entropy.h"

namespace mt {

Norm register_final_norm(const ModelConfig& cfg, const TensorParallelShard& tp, ParamTable& table) {
  // Under sequence parallelism the final norm sees only this rank's rows: partial gradients.
  const bool sp = tp.size > 1 && tp.sequence_parallel;
  if (cfg.llama()) return Norm(NormKind::rmsnorm, "model.norm", cfg.dim, cfg.norm_eps, sp, table);
  return Norm(NormKind::layernorm, "transformer.ln_f", cfg.dim, 1e-5f, sp, table);
}

void register_head_params(const ModelConfig& cfg, const TensorParallelShard& tp,
                          ParamTable& table) {
  register_head_matrix(cfg, tp, table);
  register_final_norm(cfg, tp, table);
}

LMHead::LMHead(const ModelConfig& cfg, const TensorParallelShard& tp, int max_b, ParamTable& table,
               SlotLayout& layout, const uint64_t* bf16_version)
    : C_(cfg.dim),
      max_n_(max_b * cfg.seq),
      bf16_(bf16_version != nullptr),
      tp_(tp),
      sp_(tp.size > 1 && tp.sequence_parallel),
      shard_(tp::vocab_shard(cfg.vocab, tp.size, tp.rank)),
      head_(tp, cfg.dim, shard_.rows) {
  wte_info_ = &register_head_matrix(cfg, tp, table);
  norm_ = register_final_norm(cfg, tp, table);
  if (bf16_) head_.enable_bf16(bf16_version);
  // ln_f's output is read only by the head's GEMMs: bf16 under --precision bf16.
  auto gemm_only = [&](size_t count) { return reserve_gemm_operand(layout, count, bf16_); };
  const size_t N = size_t(max_b) * cfg.seq, Nl = sp_ ? N / tp.size : N;
  off_.lnf_out = gemm_only(Nl * C_);
  norm_.reserve(layout, Nl);
  off_.lnf_full = sp_ ? gemm_only(N * C_) : off_.lnf_out;
  off_.logits = layout.reserve(N * size_t(shard_.rows));
  off_.losses = layout.reserve(N);
  off_.ce_stats = layout.reserve(3 * N);
  off_.d_lnf = layout.reserve(Nl * C_);
}

void LMHead::bind(float* params, float* grads) {
  norm_.bind(params, grads);
  head_.bind(params + wte_info_->offset, nullptr, grads + wte_info_->offset, nullptr);
}

size_t LMHead::bf16_stage_floats() const {
  return 0;  // ln_f's output is rounded as the norm stores it: no fp32 result to stage
}

size_t LMHead::bf16_gather_values() const {
  return 0;  // dlogits is rounded in its own place (dlogits below)
}

double LMHead::forward(float* s, const float* x_in, const int* targets, int b, int T, float dloss) {
  // Nothing pending: x_in is only read.
  return forward_chained(s, const_cast<float*>(x_in), nullptr, targets, b, T, dloss);
}

double LMHead::forward_chained(float* s, float* x_in, const float* pending, const int* targets,
                               int b, int T, float dloss) {
  const int N = b * T, Nl = rows(b, T);
  float* logits = s + off_.logits;
  // ln_f's output rounded as the norm stores it under bf16 (bitwise the rounding of its fp32
  // output: no pass of its own), then (N, Vl) = lnf @ wte_shard^T; under sequence
  // parallelism lnf is gathered into lnf_full.
  with_precision_ops(bf16_, scratch_, [&](const auto& p) {
    auto* lnf_out = p.act(s, off_.lnf_out);
    if (pending)
      norm_.add_forward(s, lnf_out, x_in, pending, Nl);
    else
      norm_.forward(s, lnf_out, x_in, Nl);
    p.forward(head_, logits, lnf_out, N, p.act(s, off_.lnf_full));
  });
  if (!targets) return 0.0;
  float* losses = s + off_.losses;
  tp::vocab_parallel_crossentropy(losses, logits, targets, dloss, N, shard_, tp_.comm,
                                  s + off_.ce_stats);
  // Summed in double and in a fixed order so the result is deterministic.
  double sum = 0;
  for (int n = 0; n < N; ++n) sum += losses[n];
  return sum;
}

// dlogits as the head's GEMMs read it: the fp32 values in the logits' place, or under bf16
// their rounding, made in place by B (the first reader: B runs before W on every schedule)
// and read as it is by W. One conversion pass, no buffer of its own.
template <class Ops>
const typename Ops::Act* LMHead::dlogits(float* s, size_t n, bool round) const {
  if constexpr (std::is_same_v<typename Ops::Act, bf16>)
    return round ? to_bf16_in_place(s + off_.logits, n)
                 : reinterpret_cast<const bf16*>(s + off_.logits);
  else
    return s + off_.logits;
}

void LMHead::backward_input(float* s, const float* x_in, float* dx_in, int b, int T) {
  const int N = b * T, Nl = rows(b, T);
  float* d_lnf = s + off_.d_lnf;
  with_precision_ops(bf16_, scratch_, [&](const auto& p) {
    using Ops = std::decay_t<decltype(p)>;
    p.backward_input(head_, d_lnf, dlogits<Ops>(s, size_t(N) * shard_.rows, true), N);
  });
  norm_.backward_input_overwrite(s, dx_in, d_lnf, x_in, Nl);  // no memset of dx_in first
}

void LMHead::backward_weight(float* s, const float* x_in, int b, int T) {
  const int N = b * T, Nl = rows(b, T);
  with_precision_ops(bf16_, scratch_, [&](const auto& p) {
    using Ops = std::decay_t<decltype(p)>;
    p.backward_weight_gathered(head_, dlogits<Ops>(s, size_t(N) * shard_.rows, false),
                               p.act(s, off_.lnf_full), N);
  });
  norm_.backward_weight(s, s + off_.d_lnf, x_in, Nl);
}

}  // namespace mt
