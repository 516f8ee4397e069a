#include "plan/memory_bounds.h"

#include <algorithm>
#include <cmath>

#include "plan/model_flops.h"

namespace mt::plan {

namespace {

using LD = long double;

// The most microbatches whose activations one stage holds at once, summed over its local
// chunks (the executor's rule: F acquires a slot, B releases it, or W when the backward is
// split; an F&B pair acquires its F half's and releases its B half's); 1 without pp, where
// one set of slots serves every microbatch.
LD live_slots(const Schedule& s) {
  if (s.actions.empty()) return 1;
  const ActionKind release = s.split_backward ? ActionKind::W : ActionKind::B;
  LD most = 1;
  for (const std::vector<Action>& stage : s.actions) {
    std::vector<long> live(size_t(std::max(s.chunks, 1)), 0), peak(live.size(), 0);
    for (const Action& a : stage) {
      const size_t c = size_t(a.chunk);
      if (a.kind == ActionKind::F || a.kind == ActionKind::FB)
        peak[c] = std::max(peak[c], ++live[c]);
      if (a.kind == release) --live[c];
      if (a.kind == ActionKind::FB && release == ActionKind::B) --live[size_t(a.b_chunk)];
    }
    LD sum = 0;
    for (long p : peak) sum += LD(p);
    most = std::max(most, sum);
  }
  return most;
}

// Upper, in bytes, of every count the estimate makes, with `slots` microbatches' activations
// live on a stage at once: one block's parameters (padding included) and buffers as if
// unsplit; the model's parameters bound every per-parameter part (params, grads, moments,
// ZeRO buckets and gathers, expert and embedding copies, the model arenas: 20 copies at most).
LD upper_bytes(const PlanRequest& r, const Layout& l, LD slots) {
  const ModelConfig& m = r.model;
  const BlockWidths w = block_widths(m, r.attention);
  // The GPT block's widths, or the Llama block's where they are larger (head-dim, ffn-dim).
  const LD T = m.seq, C = std::max<LD>(m.dim, std::max(w.q, w.kv)), V = m.vocab, L = m.layers;
  const LD H = std::max<LD>(std::max<LD>(4 * LD(m.dim), 1.5L * w.ffn),
                            1.5L * std::max(w.expert_ffn, w.shared_ffn)),
           heads = m.heads;
  const LD E = m.experts, k = m.topk, El = E / l.ep;
  const LD tp = l.tp, dp = l.dp, b = l.micro_batch, N = b * T, v = l.virtual_stages;
  const LD M = microbatches(r, l), R = l.ep * N * std::min(k, El);  // MoE rows (dropless)
  const LD block_params =
      16 * C * C + 4 * C * H + E * (2 * H * C + H + 2 * C) + 64 * (E + 16) + 16 * dp;
  const LD model_params = (L + 2) * block_params + (V + tp) * C + T * C;
  const LD block_buffers =
      64 * N * (C + H + E + k * C) + b * heads * T * T + R * (3 * H + 2 * C) + 2 * N * E + 2048;
  const LD head = 8 * N * C + 2 * N * (V + tp) + 8192;
  // A stage's slot: its blocks, the residual stream of each of its v chunks, the head.
  const LD slot = L * block_buffers + (2 * L + 2 * v) * (N * C + 16) + head;
  // Scratch per chunk (recomputation, attention backward, bf16 stages, the head's gather),
  // per MoE layer (row buffers), the pipeline's transfer buffers, the data loader.
  const LD workspace = v * (2 * block_buffers + head) +
                       L * (4 * (N * k + R) * (C + H) + 128 * (C + H)) + 2 * slots * N * C +
                       2 * M * N;
  return 4 * (20 * model_params + slots * slot + workspace);
}

}  // namespace

MemoryBounds memory_lower_bound(const PlanRequest& r, const Layout& l) {
  const ModelConfig& m = r.model;
  const BlockWidths w = block_widths(m, r.attention);
  const LD C = m.dim, El = LD(m.experts) / l.ep, mlp = LD(w.mlp_matrices()) * C * w.ffn;
  const LD experts = El * LD(w.expert_mlp()) + LD(w.shared_mlp()) / l.tp;
  const LD tp = l.tp, dp = l.dp, N = LD(l.micro_batch) * m.seq, M = microbatches(r, l);
  const LD Nl = l.sequence_parallel ? N / tp : N;
  // Some stage holds at least ceil(L / pp) blocks, each with its attention and MLP (or
  // experts) weights split over tp (and over dp by ZeRO), and the residual stream of those
  // blocks for one microbatch (once: full recomputation keeps one copy).
  const LD stage_blocks = LD((int64_t(m.layers) + l.pp - 1) / l.pp);
  // A stage may hold dense blocks or MoE blocks (--moe-every, --first-dense-layers): the
  // smaller of the two MLPs, unless every block is MoE.
  const bool moe_only = m.experts > 0 && m.moe_every == 1 && m.first_dense_layers == 0;
  const LD attention = LD(w.att.weights(1));  // MHA: C (2q + 2kv)
  const LD mlp_part = moe_only ? experts : m.experts > 0 ? std::min(experts, mlp / tp) : mlp / tp;
  const LD per_block = attention / tp + mlp_part;
  const LD weights = stage_blocks * per_block;
  // GPU presets model bf16 activations (and the loader's share of the buffers) at half.
  const LD act = !r.hardware.local && l.precision == Precision::bf16 ? 2 : 4;
  MemoryBounds out;
  out.upper = HUGE_VALL;
  out.params = 4 * weights / (l.zero == 3 ? dp : 1);
  out.grads = 4 * weights / (l.zero >= 2 ? dp : 1);
  out.optimizer = 8 * weights / (l.zero >= 1 ? dp : 1);
  out.activations = act * (stage_blocks + 1) * Nl * C;
  out.buffers = act * 2 * M * N;  // tokens and targets, int32
  return out;
}

MemoryBounds memory_bounds(const PlanRequest& r, const Layout& l, const Schedule& schedule) {
  MemoryBounds out = memory_lower_bound(r, l);
  // Without pp one set of slots serves every microbatch. With pp, the schedule's live slots
  // only when the bound with every microbatch live in every chunk is too large: counting
  // them walks the whole schedule.
  const LD M = microbatches(r, l);
  out.upper = upper_bytes(r, l, l.pp > 1 ? std::max<LD>(M, 1) * l.virtual_stages : 1);
  if (out.upper > kMaxEstimateBytes && l.pp > 1)
    out.upper = upper_bytes(r, l, live_slots(schedule));
  return out;
}

}  // namespace mt::plan
