// The GPU cost model: a preset's datasheet rates (hardware_profile.cpp) and the training
// software it plans for (software_profiles.h): what each software field adds to a block and
// to a stage's edges.
#include <algorithm>
#include <utility>
#include <vector>

#include "model/block.h"
#include "plan/cost_model.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mt::plan {

namespace {

// Dropout on the attention probabilities: a separate pass after the fused softmax (read,
// write and a 1-byte mask per element; its backward reads the gradient and the mask and
// writes). Part of the core, so selective recomputation repeats it too.
Passes attention_core(const CostContext& c) {
  Passes p = gemm_attention_core(c);
  if (!c.r.hardware.dropout || c.flash) return p;
  const double elems = c.b * c.a / c.t * c.s * c.s, bytes = elems * (2 * c.e + 1);
  p.forward += pointwise_seconds(c.rates, elems, bytes, 1);
  p.backward += pointwise_seconds(c.rates, elems, bytes, 1);
  return p;
}

// The fused bias-dropout-add of both residual branches also writes (forward) and reads
// (backward) a 1-byte mask per element.
Passes residual_dropout(const CostContext& c) {
  if (!c.r.hardware.dropout) return {};
  const double masks = 2 * stream_seconds(c.rates, c.Nl * c.h, 0);
  return {masks, masks, 0};
}

// Each linear's bias gradient: its output gradient summed over its rows, a memory-bound
// read (qkv and fc1 column-parallel: (q + 2 kv)/t and F/t wide; proj and fc2: h wide on the
// rank's rows). Megatron computes them as grad_output.sum(0) in the backward. The Llama
// block has no biases.
Passes bias_gradients(const CostContext& c, bool moe) {
  if (!c.w.biases) return {};
  const double t = c.t, cols = (c.w.q + 2 * c.w.kv) / t + (moe ? 0.0 : c.w.ffn / t);
  return {0, 0, stream_seconds(c.rates, (c.N * cols + 2 * c.Nl * c.h) * c.e, moe ? 3 : 4)};
}

// RoPE on q and k (Llama): a pointwise pass reading and writing both in forward and their
// gradients in backward (Transformer Engine's fused rotary kernel, one per tensor). MLA
// rotates each query head's rope part (split over tp) and the one shared k_pe (on every rank).
Passes rotary(const CostContext& c) {
  if (!c.w.gated) return {};
  const double elems = c.N * (c.w.att.rope_width / c.t + c.w.att.rope_shared);
  const double pass = pointwise_seconds(c.rates, elems, 2 * elems * c.e, 2);
  return {pass, pass, 0};
}

// GEMMs a tp collective may hide under: their seconds and, of them, what they lose while
// tp_overlap_sms of the sms are held (each GEMM's seconds x held_sms_loss of its output).
struct BesideGemms {
  double seconds = 0, lost = 0;
  void add(const CostContext& c, double gemm, double M, double N) {
    const HardwareProfile& hw = c.r.hardware;
    seconds += gemm;
    lost += gemm * held_sms_loss(hw.sms, hw.tp_overlap_sms, M, N);
  }
};

// What GEMMs lose to HIDDEN seconds of tp communication beside them whose kernels hold
// tp_overlap_sms of the sms (Transformer Engine's userbuffers bulk and pipeline overlaps):
// over those seconds the GEMM runs on the SMs left, in the waves they need
// (held_sms_loss: for large GEMMs the held share, more for a GEMM just past a reduced wave,
// nothing for one within it), the time-weighted share of the GEMMs beside it.
double tp_sms_seconds(const BesideGemms& g, double hidden) {
  return g.seconds > 0 ? hidden * g.lost / g.seconds : 0;
}

// tp_comm_overlap (Transformer Engine's userbuffers under Megatron-Core's --tp-comm-overlap,
// SP only): each forward all-gather is pipelined with the column-parallel GEMM it feeds
// (ring exchange: a chunk's GEMM while the next chunk arrives), each forward reduce-scatter
// with the row-parallel GEMM it follows (the GEMM in splits, each split's reduce-scatter
// under the next), and the row-parallel backward's all-gather of the output gradient with
// its input-gradient GEMM; each exposes what exceeds its GEMM. Returns the forward's exposed
// collectives and the backward's row-parallel ones (the column-parallel backward is
// tp_backward_overlap's, below). cols: the column-parallel (dgrad, wgrad) GEMMs; the first
// has the forward GEMM's shape. The forward reduce-scatters (TE's pipeline method) hold
// tp_overlap_sms while they hide (tp_sms_seconds); the ring exchanges copy with the copy
// engines and hold none. Not modelled: the smaller GEMMs of the splits.
Passes pipelined_tp_comm(const CostContext& c, bool moe, bool mlp_collective, double half,
                         const std::vector<std::pair<BesideGemms, BesideGemms>>& cols) {
  const double N = c.N, h = c.h, t = c.t;
  std::vector<std::pair<BesideGemms, double>> rows;  // row-parallel (forward, dgrad) GEMMs
  std::pair<BesideGemms, double> attention = {};
  for (const Projection& x : c.w.att.projections) {
    if (x.split != ProjectionSplit::row) continue;
    attention.first.add(c, weight_gemm(c, c.rates, N, x.rank_out(t), x.rank_in(t)), N,
                        x.rank_out(t));
    attention.second += weight_gemm(c, c.rates, N, x.rank_in(t), x.rank_out(t));
  }
  rows.push_back(attention);
  if (mlp_collective) {
    const double down = (moe ? c.w.shared_ffn : c.w.ffn) / t;
    BesideGemms forward;
    forward.add(c, weight_gemm(c, c.rates, N, h, down), N, h);
    rows.push_back({forward, weight_gemm(c, c.rates, N, down, h)});
  }
  Passes p;
  for (const auto& [dgrad, wgrad] : cols) p.forward += std::max(0.0, half - dgrad.seconds);
  for (const auto& [forward, dgrad] : rows) {
    p.forward += std::max(0.0, half - forward.seconds) +
                 tp_sms_seconds(forward, std::min(half, forward.seconds));
    p.backward += std::max(0.0, half - dgrad);
  }
  return p;
}

// Megatron: two all-reduces of (N, h) per block in forward and two in backward; with SP an
// all-gather + reduce-scatter pair in their place, costed as the all-reduce it replaces
// (nccl-tests: an all-reduce moves what a reduce-scatter + all-gather of the buffer move).
// With tp_backward_overlap (Megatron-LM 2022) a column-parallel linear's backward (qkv,
// fc1) runs the input's all-gather (SP) under its input-gradient GEMM and the input
// gradient's reduce-scatter / all-reduce under its weight-gradient GEMM: only the excess is
// exposed; under SP the row-parallel layers' backward all-gathers stay exposed.
// Under SP a column-parallel linear keeps only its sequence shard of the input (the memory
// model's Korthikanti items count it so, gpu_memory.cpp), so its weight gradient gathers the
// input again in backward (Korthikanti et al. 2022, 4.2.2): one more all-gather per tp
// region, exposed without tp_backward_overlap (which hides it under the input gradient).
Passes tp_comm(const CostContext& c, bool moe) {
  if (c.l.tp <= 1) return {};
  const HardwareProfile& hw = c.r.hardware;
  const double bytes = c.N * c.h * c.e, N = c.N, h = c.h, t = c.t;
  const bool sp = c.l.sequence_parallel;
  // An MoE layer splits its tokens over tp (docs/moe.md): its routed experts need no tp
  // collective under SP, and without SP all-gather their outputs (forward) and the input
  // gradients (backward); its shared experts are a tp-split MLP like the dense one.
  const bool mlp_collective = !moe || c.w.shared_ffn > 0;
  const double up = (c.w.gated ? 2 : 1) * (moe ? c.w.shared_ffn : c.w.ffn) / t;
  const double routed =
      moe && !sp ? collective_seconds(hw, Collective::all_gather, bytes, c.tp) : 0.0;
  const double n = mlp_collective ? 2 : 1;
  const double one = sp ? collective_seconds(hw, Collective::all_gather, bytes, c.tp) +
                              collective_seconds(hw, Collective::reduce_scatter, bytes, c.tp)
                        : collective_seconds(hw, Collective::all_reduce, bytes, c.tp);
  const double regather = sp ? n * collective_seconds(hw, Collective::all_gather, bytes, c.tp) : 0;
  if (!hw.tp_backward_overlap) return {n * one + routed, n * one + regather + routed, 0};
  // (input-gradient GEMM, weight-gradient GEMM) of each tp region's column-parallel linears:
  // the attention's (MHA's q/k/v; MLA's two up-projections, one collective under both). The
  // input gradient is priced at the forward's shape (linear_passes); its output, for the
  // waves, is the layer's input.
  std::pair<BesideGemms, BesideGemms> attention;
  for (const Projection& x : c.w.att.projections) {
    if (x.split != ProjectionSplit::column) continue;
    const double out = x.rank_out(t), in = x.rank_in(t);
    attention.first.add(c, weight_gemm(c, c.rates, N, out, in), N, in);
    attention.second.add(c, weight_gemm(c, c.rates, out, in, N, 1, false), out, in);
  }
  std::vector<std::pair<BesideGemms, BesideGemms>> cols = {attention};
  if (mlp_collective) {
    std::pair<BesideGemms, BesideGemms> mlp;
    mlp.first.add(c, weight_gemm(c, c.rates, N, up, h), N, h);
    mlp.second.add(c, weight_gemm(c, c.rates, up, h, N, 1, false), up, h);
    cols.push_back(mlp);
  }
  const double half = one / 2;  // one all-gather or one reduce-scatter
  const Passes rows = sp && hw.tp_comm_overlap
                          ? pipelined_tp_comm(c, moe, mlp_collective, half, cols)
                          : Passes{n * one, sp ? n * half : 0, 0};
  double backward = rows.backward;
  for (const auto& [dgrad, wgrad] : cols) {  // the bulk overlaps, holding tp_overlap_sms
    const double d = dgrad.seconds, w = wgrad.seconds;
    backward += sp ? std::max(0.0, half - d) + std::max(0.0, half - w) +
                         tp_sms_seconds(dgrad, std::min(half, d)) +
                         tp_sms_seconds(wgrad, std::min(half, w))
                   : std::max(0.0, one - w) + tp_sms_seconds(wgrad, std::min(one, w));
  }
  return {rows.forward + routed, backward + routed, 0};
}

// DeepSeek-V3's recomputation in backward (unless the whole forward is recomputed):
// norm_up_proj_recompute repeats the RMSNorms (the block's two and MLA's latent ones) and
// the up-projections (3.2.3: MLA's W_qb and W_kvb; MHA's q/k/v GEMM); up_proj_recompute the
// up-projections and RoPE alone, dense_mlp_recompute a dense layer's MLP forward
// (Megatron-Core's recompute_modules "mla_up_proj", "mlp"); fp8_activation_cache
// recomputes the MoE SwiGLU's output from its FP8 input (3.3.3), a pass reading gate and up and
// writing the product, routed and shared.
double recomputed_pieces(const CostContext& c, bool moe) {
  const HardwareProfile& hw = c.r.hardware;
  if (c.l.recompute == Recompute::full) return 0;
  double t = 0;
  if (hw.norm_up_proj_recompute) {
    const double rows = c.Nl * c.h;
    const double ln = pointwise_seconds(c.rates, rows, 2 * rows * c.e, 1);
    t += 2 * ln;
    const double latent = c.N * c.w.att.latent_norms;
    if (latent > 0) t += pointwise_seconds(c.rates, latent, 2 * latent * c.e, 2);
  }
  if (hw.norm_up_proj_recompute || hw.up_proj_recompute) {
    for (const Projection& x : c.w.att.projections)
      if (x.up) t += weight_gemm(c, c.rates, c.N, x.rank_out(c.t), x.rank_in(c.t));
    if (hw.up_proj_recompute) t += rotary(c).forward;
  }
  if (hw.dense_mlp_recompute && !moe) t += dense_mlp(c).forward;
  if (hw.fp8_activation_cache && moe && c.w.gated && c.l.precision == Precision::bf16) {
    const double local = c.r.model.experts / c.l.ep;
    const double routed = c.N / c.t * c.r.model.topk * c.w.expert_ffn;
    const double shared = c.N * c.w.shared_ffn / c.t;
    t += pointwise_seconds(c.rates, routed, routed * (2 + c.e), int(local));
    if (shared > 0) t += pointwise_seconds(c.rates, shared, shared * (2 + c.e), 1);
  }
  return t;
}

BlockCosts block(const CostContext& c, int layer, double) {
  const bool moe = is_moe_layer(c.r.model, layer);
  Passes p = attention_projections(c);
  const Passes core = attention_core(c);
  p += core;
  p += norms_and_residuals(c);
  p += rotary(c);
  p += residual_dropout(c);
  double ep = 0;
  p += moe ? streamed_moe(c, &ep) : dense_mlp(c);
  p += bias_gradients(c, moe);
  const Passes tp = tp_comm(c, moe);
  p += tp;
  const Passes cp = cp_exchange(c, core);
  p += cp;
  BlockCosts k = finish_block(c, p, core.forward, tp.forward + tp.backward, ep);
  k.cp_comm = cp.forward + cp.backward;
  const double again = recomputed_pieces(c, moe);
  k.recompute += again;
  k.passes.backward += again;
  return k;
}

// The embedding's output all-reduced over tp (SP: the same bytes as a reduce-scatter).
Passes embedding_comm(const CostContext& c, double* tp) {
  if (c.l.tp <= 1) return {};
  const double ar = collective_seconds(c.r.hardware, Collective::all_reduce, c.N * c.h * c.e, c.tp);
  *tp += ar;
  return {ar, 0, 0};
}

// The cross-entropy: three pointwise passes at the activation precision, or (fp32) the
// logits cast to fp32 (read e, write 4), then max (4), subtract (8), exp (8), sum (4),
// divide (8) per logit; backward: scale the saved softmax (8) and cast the gradient back
// (4 + e). Then its reductions over tp.
Passes head(const CostContext& c, double* tp) {
  const double NV = c.N * (double(tp::padded_vocab(c.r.model.vocab, c.l.tp)) / c.l.tp);
  double ce = pointwise_seconds(c.rates, NV, 3 * NV * c.e, 3), ce_bwd = ce;
  if (c.r.hardware.fp32_cross_entropy) {
    ce = pointwise_seconds(c.rates, NV, NV * (c.e + 4 + 32), 6);
    ce_bwd = pointwise_seconds(c.rates, NV, NV * (12 + c.e), 2);
  }
  Passes p = head_compute(c, ce, ce_bwd);
  const double small = cross_entropy_comm(c);
  p.forward += small;
  *tp += small;
  return p;
}

// grad_accum_pass: after each weight gradient, read the 16-bit gradient and read and write
// the reduction buffer (Megatron's DDP hook main_grad.add_(grad)).
Passes after_block(const CostContext& c, double params) {
  if (!c.r.hardware.grad_accum_pass) return {};
  return {0, 0, stream_seconds(c.rates, params * (c.e + 2 * c.r.hardware.grad_reduce_bytes), 0)};
}

Passes per_stage(const CostContext&, double) {
  return {};
}

}  // namespace

const CostModel& gpu_cost_model() {
  static const CostModel m{block, embedding_comm, head, after_block, per_stage};
  return m;
}

}  // namespace mt::plan
