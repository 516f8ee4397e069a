// The local cost model: meshtrain's own engine on this machine, from the calibrated profile
// (calibrate.h). Every term follows what the engine's code does: its attention kernel, its
// MoE layer (model/moe_layer.cpp), the collectives its tensor-parallel linears issue
// (tensor_parallel/*_linear.cpp), the bf16 roundings of its bf16 path
// (model/block.cpp, row_parallel_linear.cpp, lm_head.cpp, kernels/bf16_weight.h).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "model/block.h"
#include "model/moe_layer.h"
#include "plan/cost_model.h"
#include "plan/cp_attention_factor.h"
#include "plan/memory_model.h"
#include "plan/overlapped_exchange.h"
#include "plan/time_model.h"
#include "schedule/schedule_kind.h"
#include "tensor_parallel/vocab_parallel.h"
#include "train/expert_grads_in_b.h"

namespace mt::plan {

namespace {

// Whether the profile has the MoE layer's calibrated costs for the precision (older
// profiles keep the streamed model of cost_model.h).
bool moe_calibrated(const HardwareProfile& hw, bool bf16) {
  return bf16 ? hw.moe_fwd_s_bf16 > 0 && hw.moe_bwd_s_bf16 > 0 && hw.moe_wgt_s_bf16 > 0
              : hw.moe_fwd_s > 0 && hw.moe_bwd_s > 0 && hw.moe_wgt_s > 0;
}

// Once per backward the cp rank adds the dK/dV sum that came home (ring) or was
// reduce-scattered to it (all-gather) into its K/V gradients
// (context_parallel_attention.cpp add_kv_grads): the block read, the gradients read and
// written, at the calibrated streaming rate: the probe behind the cp factor
// (cp_attention_probe.cpp) times the ring's per-step adds, not this one. With or without the
// factor (it prices the attention calls, this a pass after them).
double cp_grads_home(const CostContext& c) {
  if (c.l.cp <= 1) return 0;
  const double floats = c.N * (c.w.kv + c.w.v) / c.t;
  return stream_seconds(c.rates, 3 * floats * 4);
}

// The engine's own attention kernel at its calibrated rate (4 b s^2 q / t FLOPs forward,
// twice that backward; q = heads x head_dim), or, in a profile without it, the GEMM core.
// The Llama block's flash attention is costed at the rate calibrated on the GPT block's
// kernel (not calibrated separately). A cp rank attends s / cp queries to s keys, 1 / cp of
// the FLOPs, in the ring's smaller calls and merges: the calibrated cp factor prices those
// (cp_attention_factor.h). A profile without it keeps the whole sequence's FLOPs, which
// stood in for that overhead before it was measured (docs/planner.md).
Passes attention_core(const CostContext& c) {
  const ComputeRates& R = c.rates;
  if (R.attention_fwd <= 0 || R.attention_bwd <= 0) return gemm_attention_core(c);
  const double cp = cp_attention_factor(c.r.hardware, c.local_bf16, c.l.cp);
  const double whole = 4 * c.b * c.s * c.s * c.w.q / c.t;
  const double flops = cp > 0 ? whole / c.l.cp * cp : whole;
  return {flops / R.attention_fwd + R.overhead_s,
          2 * flops / R.attention_bwd + R.overhead_s + cp_grads_home(c), 0};
}

// The shared experts' SwiGLU (split over tp as the dense MLP) in the two halves the llama
// block runs as the overlapped layer's LocalWork (model/llama_block.cpp): forward [gate; up]
// and the SwiGLU first, down_proj last; backward down_proj's input gradient and the
// SwiGLU's first, [gate; up]'s last. Their weight gradients stay in W.
struct SharedHalves {
  double forward_first = 0, forward_last = 0, backward_first = 0, backward_last = 0;
};
SharedHalves shared_halves(const CostContext& c) {
  if (c.w.shared_ffn <= 0) return {};
  const ComputeRates& R = c.rates;
  const double N = c.N, h = c.h, F = c.w.shared_ffn / c.t, up = c.w.gated ? 2 * F : F;
  const Passes gate_up = linear_passes(c, R, N, {{up, h}}), down = linear_passes(c, R, N, {{h, F}});
  // As mlp_of_width prices the activation (the shared experts are SwiGLU: llama only).
  const double act = pointwise_seconds(R, N * F, 3 * N * F * c.e, 1);
  const double act_bwd = pointwise_seconds(R, N * F, 5 * N * F * c.e, 1);
  return {gate_up.forward + act, down.forward, down.backward + act_bwd, gate_up.backward};
}

// --moe-overlap-parts P > 1 (model/moe_parts.h): the experts run once per part over the
// part's share of the rows (model/moe_part_sizes.h: 1 : 2 : .. : 2 : 1 from 3 parts on,
// equal at 2; P calls of each expert's GEMMs), each part's rows travel by their own
// all-to-all (its own latency), and the exposed exchange is what the parts' experts and the
// local work leave uncovered (overlapped_exchange.h), each wait with the sizes of the parts
// it involves. The local work: the shared experts' halves, in
// backward also the router's logits gradient (a pass over the gates' and their gradient's N
// x E, part of the calibrated rest, so not added to the compute) and, where the trainer
// moves them into B (train/expert_grads_in_b.h), the routed experts' weight gradients:
// moe_layer.cpp's one pass over every part's rows, as W would run it. The first backward
// local work also holds `cover`, the unit above's W (stage_costs.cpp), where the engine
// hands it to the layer (MoeLayer::takes_backward_cover: W in B's rule, tp 1).
Passes overlapped_moe(const CostContext& c, const MoeCosts& whole, double rows, double cover,
                      double* ep_comm) {
  const ModelConfig& m = c.r.model;
  const int P = c.r.hardware.a2a_overlap_parts;
  const double N = c.N / c.t, h = c.h, E = m.experts, local = E / c.l.ep, F = c.w.expert_ffn;
  const ComputeRates& R32 = c.local_bf16 ? c.rates32 : c.rates;
  const auto costs = [&](double per_expert) {
    return local_moe_costs(
        c.rates, R32, std::vector<double>(size_t(per_expert > 0 ? local : 0), per_expert), N, E, h,
        F, c.local_bf16, MoeLayer::bf16_chunk_rows(int(N)), (c.w.gated ? 2 : 1) * F);
  };
  const MoeCosts router = costs(0);
  // One part's experts: its GEMMs, without the router and the calibrated rest (the
  // gathers, gate sums and permutations on the token side, run in prepare / complete).
  Passes p{router.forward, router.backward, whole.weight};
  const auto experts = [&](double part_rows) {
    const MoeCosts part = costs(part_rows / local);
    p.forward += part.forward - router.forward, p.backward += part.backward - router.backward;
    return std::pair{part.forward - router.forward - part_rows * F * c.rates.moe_fwd_s,
                     part.backward - router.backward - part_rows * F * c.rates.moe_bwd_s};
  };
  const std::vector<std::pair<double, double>> X = per_part(P, rows, experts);
  ParallelOptions po;
  po.zero = c.l.zero, po.schedule = schedule_kind(c.l.schedule);
  const bool in_b = expert_grads_in_b(po);
  const double dw = in_b ? whole.weight - router.weight : 0;
  const double above = in_b && c.l.tp == 1 ? cover : 0;
  p.backward += dw, p.weight -= dw;
  const SharedHalves s = shared_halves(c);
  const double logits_grad = pointwise_seconds(R32, N * E, 3 * N * E * 4, 1);
  const std::vector<double> a2a = per_part(P, rows, [&](double part_rows) {
    return collective_seconds(c.r.hardware, Collective::all_to_all, part_rows * h * 4, c.ep);
  });
  std::vector<double> Xf, Xb;
  for (const auto& [f, b] : X) Xf.push_back(f), Xb.push_back(b);
  *ep_comm = exposed_parts_exchange({a2a, a2a, Xf, s.forward_first, s.forward_last}) +
             exposed_parts_exchange(
                 {a2a, a2a, Xb, s.backward_first + above, s.backward_last + logits_grad + dw});
  return p;
}

// The engine's MoE layer: the fp32 router, each local expert's GEMMs over its rows (SwiGLU
// experts: gate and up one GEMM 2F wide, then down; the GELU ones F and F) (bf16:
// over row chunks), the rest of the layer at its calibrated cost per hidden element
// (local_moe_costs). With expert parallelism every exchange waits for the busiest ep rank:
// its rows are the mean (N topk) times busiest_rank_load, spread evenly over its experts.
Passes calibrated_moe(const CostContext& c, double cover, double* ep_comm) {
  const ModelConfig& m = c.r.model;
  // The tokens split over tp (docs/moe.md): each tp rank routes its N / t rows.
  const double N = c.N / c.t, h = c.h, E = m.experts, local = E / c.l.ep;
  const double rows = N * m.topk * c.moe_busiest;
  const MoeCosts mc = local_moe_costs(
      c.rates, c.local_bf16 ? c.rates32 : c.rates, std::vector<double>(size_t(local), rows / local),
      N, E, h, c.w.expert_ffn, c.local_bf16, MoeLayer::bf16_chunk_rows(int(N)),
      (c.w.gated ? 2 : 1) * c.w.expert_ffn);
  const bool parts = c.l.ep > 1 && c.r.hardware.a2a_overlap_parts > 1;
  Passes p = parts ? overlapped_moe(c, mc, rows, cover, ep_comm)
                   : Passes{mc.forward, mc.backward, mc.weight};
  if (c.w.shared_ffn > 0) p += mlp_of_width(c, c.w.shared_ffn);  // split over tp
  if (c.l.ep > 1) {
    // regroup_blocks twice each way (to expert-major after the dispatch, back before the
    // combine; the same in backward): a read and a write of the rank's rows.
    const double regroup = stream_seconds(c.rates, 2 * rows * h * 4, 2);
    p.forward += regroup;
    p.backward += regroup;
  }
  // Dispatch + combine in forward, their adjoints in backward: the busiest rank's fp32 rows,
  // each exchange blocking.
  if (c.l.ep > 1 && !parts)
    *ep_comm = 4 * collective_seconds(c.r.hardware, Collective::all_to_all, rows * h * 4, c.ep);
  return p;
}

// The block's tensor-parallel communication as the engine's linears issue it. Without SP:
// two all-reduces of (N, h) in forward (row-parallel outputs) and two in backward
// (column-parallel input gradients). With SP: forward all-gathers the two column inputs and
// reduce-scatters the two row outputs; backward all-gathers the two row output gradients and
// reduce-scatters the two column input gradients; the weight pass gathers all four again.
// The gathers move bf16 under --precision bf16, the reductions stay fp32.
Passes tp_comm(const CostContext& c) {
  if (c.l.tp <= 1) return {};
  const HardwareProfile& hw = c.r.hardware;
  const double rows = c.N * c.h;
  if (!c.l.sequence_parallel) {
    const double ar = collective_seconds(hw, Collective::all_reduce, rows * 4, c.tp);
    return {2 * ar, 2 * ar, 0};
  }
  const double ag =
      collective_seconds(hw, Collective::all_gather, rows * (c.local_bf16 ? 2 : 4), c.tp);
  const double rs = collective_seconds(hw, Collective::reduce_scatter, rows * 4, c.tp);
  return {2 * (ag + rs), 2 * (ag + rs), 4 * ag};
}

// The bf16 block's roundings: every GEMM input kept for backward is rounded once: forward
// ln1_out, ln2_out (Nl h each), att_out (N h/t), fc_out (4 N h/t); backward the two
// row-parallel output gradients (Nl h each), d_fc (4 N h/t) and d_qkv (3 N h/t); the weight
// pass rounds the row-parallel output gradients again. An MoE block rounds its attention's
// and, for its experts, the dispatched rows and GELU outputs (N topk h, 4 N topk h) forward
// and their gradients backward (calibrated MoE layers hold those in moe_*_s_bf16).
Passes conversions(const CostContext& c, bool moe) {
  if (!c.local_bf16) return {};
  const ComputeRates& R = c.rates;
  const double Nl = c.Nl, h = c.h, per_t = c.N * h / c.t;
  if (!moe)
    return {local_convert_seconds(R, 2 * Nl * h + 5 * per_t, 4),
            local_convert_seconds(R, 2 * Nl * h + 7 * per_t, 4),
            local_convert_seconds(R, 2 * Nl * h, 2)};
  const double rows = moe_calibrated(c.r.hardware, true) ? 0.0 : c.N * c.r.model.topk * h;
  return {local_convert_seconds(R, Nl * h + per_t + 5 * rows, 4),
          local_convert_seconds(R, Nl * h + 3 * per_t + 5 * rows, 4),
          local_convert_seconds(R, Nl * h, 1)};
}

// Whether --recompute selective reruns the attention core in the engine's block. The llama
// block keeps its row statistics in every mode (llama_block.h), and so does the flash path
// a cp run takes (gpt_block.cpp); the gpt2 block drops only the (b, NH, T, T) probabilities,
// so where its kernel keeps row statistics instead (the calibrated attention_row_stats* at a
// head dim its register tiles take) there is nothing to drop and nothing to rerun: the
// kernel the plan's memory counts (memory_model.h, model/kernel_target.h).
bool selective_reruns_core(const CostContext& c) {
  if (c.r.model.llama() || c.l.cp > 1) return false;
  const int hd = c.r.model.head_dim();
  const AttentionKernel k = counted_attention_kernel(
      KernelTarget::profile, profile_kernels(c.r.hardware), c.local_bf16, hd, 1);
  return attention_saved_form_of(k) == AttentionSaved::probabilities;
}

BlockCosts block(const CostContext& c, int layer, double cover) {
  const bool moe = is_moe_layer(c.r.model, layer);
  Passes p = attention_projections(c);
  const Passes core = attention_core(c);
  p += core;
  p += norms_and_residuals(c);
  double ep = 0;
  if (!moe)
    p += dense_mlp(c);
  else if (moe_calibrated(c.r.hardware, c.local_bf16))
    p += calibrated_moe(c, cover, &ep);
  else
    p += streamed_moe(c, &ep);
  p += conversions(c, moe);
  const Passes tp = tp_comm(c);
  p += tp;
  // The engine's --cp (llama block): the ring's sends or the all-gather, on the ranks' cores.
  const Passes cp = cp_exchange(c, core);
  p += cp;
  const double again = selective_reruns_core(c) ? core.forward : 0;
  BlockCosts k = finish_block(c, p, again, tp.forward + tp.backward + tp.weight, ep);
  k.cp_comm = cp.forward + cp.backward;
  return k;
}

// vocab_parallel_embedding.cpp: under SP a reduce-scatter forward and an all-gather back;
// otherwise its output all-reduced forward.
Passes embedding_comm(const CostContext& c, double* tp) {
  if (c.l.tp <= 1) return {};
  const HardwareProfile& hw = c.r.hardware;
  const double bytes = c.N * c.h * 4;
  if (!c.l.sequence_parallel) {
    const double ar = collective_seconds(hw, Collective::all_reduce, bytes, c.tp);
    *tp += ar;
    return {ar, 0, 0};
  }
  const double rs = collective_seconds(hw, Collective::reduce_scatter, bytes, c.tp);
  const double ag = collective_seconds(hw, Collective::all_gather, bytes, c.tp);
  *tp += rs + ag;
  return {rs, ag, 0};
}

// lm_head.cpp: the cross-entropy as fp32 pointwise passes; under bf16 ln_f's output rounded
// in forward, dlogits in B and again in W. The head is a column-parallel linear: its input
// gradient is all-reduced (SP: ln_f's output all-gathered forward, the gradient
// reduce-scattered), then the cross-entropy's reductions.
Passes head(const CostContext& c, double* tp) {
  const double N = c.N, h = c.h;
  const double NV = N * (double(tp::padded_vocab(c.r.model.vocab, c.l.tp)) / c.l.tp);
  const double ce = pointwise_seconds(c.rates, NV, 3 * NV * c.e, 3);
  Passes p = head_compute(c, ce, ce);
  if (c.local_bf16)
    p += {local_convert_seconds(c.rates, c.Nl * h), local_convert_seconds(c.rates, NV),
          local_convert_seconds(c.rates, NV)};
  const HardwareProfile& hw = c.r.hardware;
  if (c.l.tp > 1 && c.l.sequence_parallel) {
    const double ag =
        collective_seconds(hw, Collective::all_gather, N * h * (c.local_bf16 ? 2 : 4), c.tp);
    const double rs = collective_seconds(hw, Collective::reduce_scatter, N * h * 4, c.tp);
    p += {ag, rs, 0};
    *tp += ag + rs;
  } else if (c.l.tp > 1) {
    const double ar = collective_seconds(hw, Collective::all_reduce, N * h * 4, c.tp);
    p.backward += ar;
    *tp += ar;
  }
  const double small = cross_entropy_comm(c);
  p.forward += small;
  *tp += small;
  return p;
}

Passes after_block(const CostContext&, double) {
  return {};
}

// What a real step pays per microbatch and linear weight element beyond its kernels
// (solved together with the step factor, reference_steps.cpp), spread over the three passes
// that each use every weight once.
Passes per_stage(const CostContext& c, double linear_weights) {
  const double mw = linear_weights * c.rates.microbatch_weight_s;
  return {mw / 3, mw / 3, mw / 3};
}

}  // namespace

const CostModel& local_cost_model() {
  static const CostModel m{block, embedding_comm, head, after_block, per_stage};
  return m;
}

double busiest_rank_load(const HardwareProfile& hw, const ModelConfig& m, int ep) {
  if (ep <= 1 || hw.moe_load_cv <= 0 || m.experts <= 1) return 1;
  // Per-expert loads x_e = mean (1 + cv_e), measured within a block's E experts, whose sum
  // is fixed: as deviations from their mean, x_e = y_e - mean(y) for independent y_e of
  // deviation sigma = cv sqrt(E / (E - 1)). A rank holds E/ep experts: its load's deviation
  // is sigma sqrt(E/ep) over its mean E/ep; the busiest of the ep ranks (their sum fixed
  // too, the common mean cancels) is expected at 1 + sigma / sqrt(E/ep) * E[max of ep
  // standard normals].
  const double E = m.experts, local = E / ep;
  const double sigma = hw.moe_load_cv * std::sqrt(E / (E - 1));
  const double busiest = 1 + sigma / std::sqrt(local) * expected_max_normal(ep);
  // A rank receives at most min(topk, E/ep) rows per token of each of the ep ranks.
  return std::min(busiest, ep * std::min(double(m.topk), local) / m.topk);
}

}  // namespace mt::plan
