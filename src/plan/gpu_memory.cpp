#include "plan/gpu_memory.h"

#include <algorithm>
#include <vector>

#include "model/block.h"
#include "model/model_chunk.h"
#include "parallel/pipeline/stage_chunks.h"
#include "plan/memory_bounds.h"
#include "plan/model_flops.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mt::plan {

namespace {

// Bytes per activation element: 16-bit training keeps 16-bit activations.
double activation_bytes(const Layout& l) {
  return l.precision == Precision::bf16 ? 2 : 4;
}

// Tokens of one microbatch on one rank (context parallelism keeps s/cp of each sequence).
double rank_tokens(const PlanRequest& r, const Layout& l) {
  return double(l.micro_batch) * r.model.seq / l.cp;
}

// Korthikanti's items of one layer for one microbatch, bytes: the tp-split ones (per rank
// already divided by t), the ones outside the tp region (replicated, or split by SP), and
// the attention core's s x s tensors, and MLA's latents (whole on every tp rank).
struct LayerItems {
  double split = 0, outside = 0, core = 0, replicated = 0;
};

// DeepSeek-V3's FP8 activation cache (3.3.3): a Linear's cached input costs 1 byte and a
// 4-byte scale per 1 x 128 tile (the 3.3.2 fine-grained quantization).
constexpr double kFp8CachedBytes = 1 + 4.0 / 128;

LayerItems layer_items(const PlanRequest& r, const Layout& l, bool moe) {
  const HardwareProfile& hw = r.hardware;
  const BlockWidths w = block_widths(r.model, r.attention);
  const double e = activation_bytes(l), t = l.tp, sb = rank_tokens(r, l), h = w.h;
  const double mask = hw.dropout ? 1 : 0;
  const bool flash = hw.flash_attention || r.model.llama();
  const bool fp8 = hw.fp8_activation_cache && l.precision == Precision::bf16;
  const bool rc = hw.norm_up_proj_recompute;  // the norms (and the up-projections)
  const bool rc_up = rc || hw.up_proj_recompute;
  const bool rc_mlp = hw.dense_mlp_recompute && !moe;
  const double linear_in = fp8 ? kFp8CachedBytes : e;  // a Linear's input kept for its Wgrad
  LayerItems x;
  // Attention: Q and K for the scores, V, the projection's input (DeepSeek: E5M6, counted at
  // 16 bits); the input of the qkv GEMM (MLA: of the down-projections) and the projection's
  // dropout mask outside the tp region. Recomputed up-projections keep their input instead
  // of Q, K and V. MLA's latents, on every tp rank: the down-projections' outputs (the latent
  // norms' inputs, q_lora + kv_lora + the shared k_pe) and, unless the norms and
  // up-projections are recomputed (3.2.3), the norms' outputs, the up-projections' inputs.
  x.split += (rc_up ? 0 : e * (w.q + w.kv) + e * w.v) + e * w.o;
  x.outside += linear_in * h + mask * h;
  x.replicated = e * w.att.latent_cache + (rc ? 0 : linear_in * w.att.latent_norms);
  // MLP: GELU's input and output, or SwiGLU's gate|up and product (the product is the down
  // projection's input); its input and mask. An MoE layer's experts (whole on their ep rank,
  // not split over tp) keep the same for each of a token's topk rows and the rows
  // themselves, and the router its fp32 probabilities; DeepSeek caches the MoE SwiGLU's
  // input in FP8 and recomputes its output.
  auto act = [&](double width) {
    return w.gated ? e * 2 * width + linear_in * width : e * width + linear_in * width;
  };
  auto moe_act = [&](double width) { return fp8 ? kFp8CachedBytes * 2 * width : act(width); };
  double experts = 0;
  if (moe) {  // tokens split over tp: each rank's experts see sb / t tokens
    experts = r.model.topk * (moe_act(w.expert_ffn) + linear_in * h) + 4.0 * r.model.experts;
    x.split += moe_act(w.shared_ffn);
  } else if (!rc_mlp) {  // recomputed: only its input (below) kept
    x.split += act(w.ffn);
  }
  x.outside += (rc ? 0 : linear_in * h) + mask * h;
  x.outside += 2 * e * h;  // the two norms' inputs
  x.split = (x.split + experts) * sb / t;
  x.outside *= sb / (l.sequence_parallel ? t : 1);
  x.replicated *= sb;
  // Scores: the softmax output, its dropout mask and output, over the rank's s/cp queries
  // and all s keys; FlashAttention keeps only the softmax statistics (fp32 per head, token).
  const double heads = double(r.model.heads) / t, queries = sb, keys = r.model.seq;
  if (flash)
    x.core = 4 * heads * queries;
  else
    x.core = heads * queries * keys * (e + mask * (1 + e));
  return x;
}

}  // namespace

double layer_activation_bytes(const PlanRequest& r, const Layout& l, bool whole, bool moe) {
  const LayerItems x = layer_items(r, l, moe);
  const bool flash = r.hardware.flash_attention || r.model.llama();
  if (!whole && l.recompute == Recompute::full)
    return activation_bytes(l) * rank_tokens(r, l) * r.model.dim / (l.sequence_parallel ? l.tp : 1);
  const bool core = whole || l.recompute != Recompute::selective || flash;
  return x.split + x.outside + x.replicated + (core ? x.core : 0);
}

double stage_peak(const Schedule& s, int stage, const std::vector<double>& per_chunk) {
  if (s.actions.empty()) return per_chunk.empty() ? 0 : per_chunk[0];
  const ActionKind release = s.split_backward ? ActionKind::W : ActionKind::B;
  double live = 0, peak = 0;
  for (const Action& a : s.actions[size_t(stage)]) {
    const double bytes = per_chunk[size_t(a.chunk)];
    if (a.kind == ActionKind::F) peak = std::max(peak, live += bytes);
    if (a.kind == release) live -= bytes;
  }
  return peak;
}

namespace {

// Activations of one microbatch in one chunk: its layers (dense, MoE), and its edges.
double chunk_bytes(const PlanRequest& r, const Layout& l, const ChunkSpec& spec,
                   const double (&layer)[2]) {
  const HardwareProfile& hw = r.hardware;
  const double e = activation_bytes(l), sb = rank_tokens(r, l), h = r.model.dim;
  const double outside = sb / (l.sequence_parallel ? l.tp : 1);
  double bytes = 0;
  for (int i = spec.first_layer; i < spec.last_layer; ++i)
    bytes += layer[is_moe_layer(r.model, i) ? 1 : 0];
  // Token ids (int64) and the embedding's dropout mask.
  if (spec.has_embedding) bytes += 8 * sb + (hw.dropout ? outside * h : 0);
  if (spec.has_head) {
    const double Vl = double(tp::padded_vocab(r.model.vocab, l.tp)) / l.tp;
    // The final norm's input and output, the logits (fp32 when cast for the loss).
    bytes += 2 * e * outside * h + (hw.fp32_cross_entropy ? 4 : 2 * e) * sb * Vl;
    // Each MTP module (stage_costs.cpp, add_mtp): its block, the projection's 2h input, and
    // the final norm and logits again.
    const double mtp = layer[is_moe_layer(r.model, r.model.layers - 1) ? 1 : 0] +
                       2 * e * outside * h + 2 * e * outside * h +
                       (hw.fp32_cross_entropy ? 4 : 2 * e) * sb * Vl;
    bytes += r.mtp_layers * mtp;
  }
  return bytes;
}

// Parameters, gradients and optimizer state of a stage's rank, and its gathered buffers.
void add_model_state(const PlanRequest& r, const Layout& l, double params, double experts,
                     double largest_block, PlannedMemory& m) {
  const double shard = double(l.dp) * l.cp, expert_shard = shard / l.ep;
  const double dense = params - experts;
  auto per_rank = [&](double bytes, int from_zero) {
    return bytes * (l.zero >= from_zero ? dense / shard + experts / expert_shard : params);
  };
  const bool mixed = l.precision == Precision::bf16;
  auto clamp = [&](double v) {
    if (v > double(kMaxEstimateBytes)) m.lower_bound = true;
    return int64_t(std::min(v, double(kMaxEstimateBytes)));
  };
  m.params = clamp(per_rank(mixed ? 2 : 4, 3));
  m.grads = clamp(per_rank(mixed ? r.hardware.grad_reduce_bytes : 4, 2));
  m.optimizer = clamp(per_rank(mixed ? 12 : 8, 1));
  // ZeRO 3: the layer computing and the one prefetched, gathered whole.
  if (l.zero == 3 && shard > 1)
    m.buffers = clamp((1 + r.hardware.zero3_prefetch) * largest_block * (mixed ? 2 : 4));
}

// Context parallelism's transient K/V of the layer computing: two blocks in flight on the
// ring (received and sent), or the whole sequence's K and V gathered and, in backward, their
// gradients before the reduce-scatter.
double cp_buffers(const PlanRequest& r, const Layout& l) {
  if (l.cp <= 1) return 0;
  const BlockWidths w = block_widths(r.model, r.attention);
  const double kv = (w.kv + w.v) / l.tp * activation_bytes(l) * l.micro_batch;
  if (l.cp_comm == CpComm::allgather) return 2 * kv * r.model.seq;
  return 2 * kv * rank_tokens(r, l);
}

}  // namespace

PlannedMemory software_memory(const PlanRequest& r, const Layout& l, const Schedule& schedule) {
  const ModelConfig& m = r.model;
  std::vector<int> per_chunk = {m.layers};
  if (l.pp > 1) per_chunk = default_stage_layers(m, l.pp, l.virtual_stages);
  const double layer[2] = {layer_activation_bytes(r, l), layer_activation_bytes(r, l, false, true)};
  const bool moe = m.experts > 0;
  const double working =
      l.recompute == Recompute::full ? layer_activation_bytes(r, l, true, moe) : 0;
  const double extra = cp_buffers(r, l);
  PlannedMemory best;
  for (int st = 0; st < l.pp; ++st) {
    // The schedule's own placement (DualPipe-V's V puts the head on stage 0, beside the
    // embedding), as stage_costs and the engine's estimate place the chunks: with the
    // interleaved placement the head's logits were charged to stage pp - 1's second chunk.
    const std::vector<ChunkSpec> specs =
        l.pp > 1 ? stage_chunk_specs(per_chunk, l.pp, st, schedule.placement)
                 : std::vector<ChunkSpec>{{0, m.layers, true, true}};
    std::vector<double> bytes;
    double params = 0, experts = 0, largest = 0;
    for (const ChunkSpec& spec : specs) {
      bytes.push_back(chunk_bytes(r, l, spec, layer));
      for (int i = spec.first_layer; i < spec.last_layer; ++i) {
        double ex = 0;
        const double p = rank_block_params(m, i, l.tp, l.ep, &ex, r.attention);
        params += p, experts += ex, largest = std::max(largest, p);
      }
      const double table = double(tp::padded_vocab(m.vocab, l.tp)) / l.tp * m.dim;
      if (spec.has_embedding) params += table + (m.llama() ? 0 : double(m.seq) * m.dim);
      if (spec.has_head)
        params +=
            (m.llama() ? 1 : 2) * double(m.dim) + (m.tied() && spec.has_embedding ? 0 : table);
      // MTP modules: a block like the last and the 2h -> h projection (embedding and head
      // shared with the main model).
      for (int k = 0; spec.has_head && k < r.mtp_layers; ++k) {
        double ex = 0;
        const double p = rank_block_params(m, m.layers - 1, l.tp, l.ep, &ex, r.attention);
        params += p + 2.0 * m.dim * m.dim / l.tp, experts += ex;
        largest = std::max(largest, p);
      }
    }
    PlannedMemory s;
    s.pp_stage = st;
    add_model_state(r, l, params, experts, largest, s);
    const double act = stage_peak(schedule, st, bytes) + working;
    s.activations = int64_t(std::min(act, double(kMaxEstimateBytes)));
    s.lower_bound = s.lower_bound || act > double(kMaxEstimateBytes);
    s.buffers += int64_t(std::min(extra, double(kMaxEstimateBytes)));
    if (st == 0 || s.total() > best.total()) best = s;
  }
  return best;
}

}  // namespace mt::plan
