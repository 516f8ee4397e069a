#include "plan/cost_model.h"

#include "plan/time_model.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mt::plan {

CostContext make_context(const PlanRequest& r, const Layout& l) {
  const bool local = r.hardware.local;
  CostContext c(r, l);
  c.model = local ? &local_cost_model() : &gpu_cost_model();
  c.rates = compute_rates(r.hardware, l.precision, l.world(), r.threads);
  // Locally bf16 rounds only the GEMM inputs: activations, reductions and pointwise passes
  // stay fp32; the GEMM path's own operand bytes are in the rates.
  c.e = l.precision == Precision::bf16 && !local ? 2.0 : 4.0;
  c.local_bf16 = local && l.precision == Precision::bf16;
  if (local) c.rates32 = compute_rates(r.hardware, Precision::fp32, l.world(), r.threads);
  if (local && r.model.experts > 0) c.moe_busiest = busiest_rank_load(r.hardware, r.model, l.ep);
  c.tp = group_span(r.hardware, l.tp, 1);
  c.cp = group_span(r.hardware, l.cp, l.tp);
  c.dp = group_span(r.hardware, l.data_ranks(), l.tp);
  c.ep = group_span(r.hardware, l.ep, l.tp * l.cp);
  c.b = l.micro_batch, c.s = r.model.seq, c.h = r.model.dim, c.a = r.model.heads, c.t = l.tp;
  c.sq = c.s / l.cp;
  c.N = c.b * c.sq;
  c.Nl = l.sequence_parallel ? c.N / c.t : c.N;
  c.w = block_widths(r.model, r.attention);
  c.flash = !local && (r.hardware.flash_attention || r.model.llama());
  c.fp8 = !local && l.precision == Precision::bf16 && r.hardware.fp8_gemms;
  c.rates8 = c.rates;
  c.rates8.peak = r.hardware.peak_fp8;
  return c;
}

double linear_gemm(const CostContext& c, const ComputeRates& R, double M, double N, double K,
                   double count) {
  if (c.r.hardware.local) return local_gemm_seconds(R, M, N, K, count);
  return gemm_seconds(R, M, N, K, c.e, count);
}

double weight_gemm(const CostContext& c, const ComputeRates& R, double M, double N, double K,
                   double count, bool cast) {
  if (!c.fp8) return linear_gemm(c, R, M, N, K, count);
  const double casts = cast ? stream_seconds(c.rates8, count * (M * K + K * N) * 4, 2) : 0;
  return gemm_seconds(c.rates8, M, N, K, 1, count) + casts;
}

Passes linear_passes(const CostContext& c, const ComputeRates& R, double M,
                     const std::vector<LinearShape>& layers, bool weights) {
  Passes p;
  double plain = 0;
  for (const LinearShape& l : layers) {
    if (c.local_bf16 && local_on_tiles(R, l.out)) {
      p.forward += local_tiles_seconds(R, M, l.out, l.in, false);
      p.backward += local_tiles_seconds(R, M, l.out, l.in, true);
    } else {
      plain += weights ? weight_gemm(c, R, M, l.out, l.in) : linear_gemm(c, R, M, l.out, l.in);
    }
  }
  // Input gradients: the same shapes; locally times the calibrated backward/forward ratio
  // of the GEMM path (1 on GPUs and for profiles without it).
  p.forward += plain;
  p.backward += plain * R.input_grad_ratio;
  return p;
}

Passes attention_projections(const CostContext& c) {
  const ComputeRates& R = c.rates;
  const double N = c.N, t = c.t;
  std::vector<LinearShape> shapes;
  double wgrad = 0;
  for (const Projection& x : c.w.att.projections) {
    shapes.push_back({x.rank_out(t), x.rank_in(t)});
    wgrad += weight_gemm(c, R, x.rank_out(t), x.rank_in(t), N, 1, false);
  }
  Passes p = linear_passes(c, R, N, shapes);
  p.weight = wgrad * R.weight_grad_ratio;
  // MLA's latent RMSNorms (replicated over tp), as the block's norms are costed.
  if (c.w.att.latent_norms > 0) {
    const double rows = N * c.w.att.latent_norms;
    const double ln = pointwise_seconds(R, rows, 2 * rows * c.e, 2);
    p.forward += ln, p.backward += 2 * ln;
  }
  return p;
}

Passes gemm_attention_core(const CostContext& c) {
  const ComputeRates& R = c.rates;
  // Scores over qk-wide heads, values v wide (the same head_dim but for MLA).
  const double sq = c.sq, s = c.s, hd = c.w.att.qk_head, hv = c.w.att.v_head;
  const double heads = c.b * c.a / c.t;
  Passes p;
  if (!c.flash) {
    p.forward = linear_gemm(c, R, sq, s, hd, heads) + linear_gemm(c, R, sq, hv, s, heads) +
                pointwise_seconds(R, heads * sq * s, 2 * heads * sq * s * c.e, 2);
    p.backward = 2 * p.forward;
    return p;
  }
  // FlashAttention: the causal half of the keys (zigzag gives every cp rank its half), no
  // s x s tensor in memory; its backward recomputes the scores: 5 products to forward's 2
  // (Dao 2023, FlashAttention-2, Algorithm 2).
  const double keys = s / 2;
  const HardwareProfile& hw = c.r.hardware;
  if (hw.attention_fwd_of_peak > 0 && hw.attention_bwd_of_peak > 0 &&
      c.l.precision == Precision::bf16) {
    // The software's fused kernel at its published rate, which holds its tiling, softmax
    // and masking: FlashAttention's count (the benchmarks' own) over that rate.
    const double flops = 2 * sq * keys * (hd + hv) * heads;
    p.forward = flops / (hw.peak_bf16 * hw.attention_fwd_of_peak) + R.overhead_s;
    p.backward = 2.5 * flops / (hw.peak_bf16 * hw.attention_bwd_of_peak) + R.overhead_s;
    return p;
  }
  p.forward = linear_gemm(c, R, sq, keys, hd, heads) + linear_gemm(c, R, sq, hv, keys, heads);
  p.backward = 2.5 * p.forward;
  return p;
}

Passes norms_and_residuals(const CostContext& c) {
  // On Nl rows under SP; the backward of a LayerNorm reads twice what its forward does.
  const double rows = c.Nl * c.h;
  const double ln = pointwise_seconds(c.rates, rows, 2 * rows * c.e, 1);
  const double residual = stream_seconds(c.rates, 3 * rows * c.e, 1);
  return {2 * ln + 2 * residual, 2 * 2 * ln + 2 * residual, 0};
}

Passes dense_mlp(const CostContext& c) {
  return mlp_of_width(c, c.w.ffn);
}

Passes mlp_of_width(const CostContext& c, double width) {
  const ComputeRates& R = c.rates;
  const double N = c.N, h = c.h, F = width / c.t, up = c.w.gated ? 2 * F : F;
  // GELU reads and writes N F; SwiGLU reads gate and up and writes their product, and its
  // backward reads both and the gradient and writes two gradients.
  const double act = c.w.gated ? pointwise_seconds(R, N * F, 3 * N * F * c.e, 1)
                               : pointwise_seconds(R, N * F, 2 * N * F * c.e, 1);
  const double act_bwd = c.w.gated ? pointwise_seconds(R, N * F, 5 * N * F * c.e, 1) : 2 * act;
  const Passes gemms = linear_passes(c, R, N, {{up, h}, {h, F}});
  const double wgrad = weight_gemm(c, R, up, h, N, 1, false) + weight_gemm(c, R, h, F, N, 1, false);
  return {gemms.forward + act, gemms.backward + act_bwd, wgrad * R.weight_grad_ratio};
}

// DeepSeek-V3's node-limited dispatch (3.2.2), balanced routing: of the M nodes a token
// picks among the group's, (nodes - 1) / nodes are remote, each paid once over IB (the NIC's
// busbw per rank); every row crosses NVLink (forwarded or sent within the node); the two
// run at once. Under fp8_gemms these kernels dispatch the experts' FP8 GEMM input (3.3.3,
// Low-Precision Communication: 1 byte and a 4-byte scale per 1 x 128 tile), the combine at
// the activation precision.
double expert_exchange_seconds(const CostContext& c, double tokens) {
  const HardwareProfile& hw = c.r.hardware;
  const double topk = c.r.model.topk, h = c.h;
  if (hw.a2a_max_nodes <= 0 || c.ep.nodes <= 1)
    return 2 * collective_seconds(hw, Collective::all_to_all, tokens * topk * h * c.e, c.ep);
  const double nodes = c.ep.nodes, n = c.ep.size;
  const double remote = std::min<double>(hw.a2a_max_nodes, nodes) * (nodes - 1) / nodes;
  auto one_way = [&](double bytes) {
    const double ib = tokens * remote * h * bytes / hw.inter_busbw;
    const double nvlink = tokens * topk * h * bytes * (n - 1) / n / hw.intra_busbw;
    return hw.inter_latency_s * 2 * std::ceil(std::log2(n)) + std::max(ib, nvlink);
  };
  const bool fp8 = hw.fp8_gemms && c.l.precision == Precision::bf16;
  return one_way(fp8 ? 1 + 4.0 / 128 : c.e) + one_way(c.e);
}

double exposed_all_to_all(double comm, double compute, int parts) {
  if (parts <= 1) return comm;
  const double rest = (parts - 1.0) / parts;
  return comm / parts + std::max(0.0, (comm - compute) * rest);
}

Passes streamed_moe(const CostContext& c, double* ep_comm) {
  const ComputeRates& R = c.rates;
  const ComputeRates& router = c.local_bf16 ? c.rates32 : R;
  // The tokens are split over tp (docs/moe.md): each tp rank routes its N / t rows through
  // whole experts of the routed width.
  const double N = c.N / c.t, h = c.h, e = c.e, topk = c.r.model.topk, F = c.w.expert_ffn;
  const double up = c.w.gated ? 2 * F : F;
  const double E = c.r.model.experts, local = E / c.l.ep, rows = N * topk / local;
  const double gelu = pointwise_seconds(R, N * topk * F, (up + F) * N * topk * e, int(local));
  Passes p;
  p.forward = linear_gemm(c, router, N, E, h) + weight_gemm(c, R, rows, up, h, local) +
              weight_gemm(c, R, rows, h, F, local) + gelu +
              stream_seconds(R, 4 * N * topk * h * e, 4);  // permute / combine
  p.backward = p.forward + gelu;
  p.weight = weight_gemm(c, R, up, h, rows, local, false) +
             weight_gemm(c, R, h, F, rows, local, false) + linear_gemm(c, router, E, h, N);
  // Dispatch + combine in forward, their adjoints in backward, each direction pipelined over
  // the software's a2a_overlap_parts under the experts' compute.
  if (c.l.ep > 1) {
    const int parts = c.r.hardware.a2a_overlap_parts;
    const double a2a = expert_exchange_seconds(c, N);
    *ep_comm = exposed_all_to_all(a2a, p.forward, parts) +
               exposed_all_to_all(a2a, p.backward + p.weight, parts);
  }
  // The shared experts (llama): one SwiGLU of width S x Fe on every token, split over tp as
  // the dense MLP.
  if (c.w.shared_ffn > 0) p += mlp_of_width(c, c.w.shared_ffn);
  return p;
}

bool cp_hops_calibrated(const HardwareProfile& hw) {
  return hw.local && (hw.cp_hop_s > 0 || hw.cp_hop_byte_s > 0);
}

namespace {

// The local ring's hops as CPU of the rank (cp_exchange_probe.cpp): on the local backend a
// hop is the rank threads' own work (the requests, the copy, the waits' bookkeeping), which
// competes for the shared cores with the attention it was to hide behind. Forward: cp - 1
// K/V hops (bf16 blocks under --precision bf16); backward: cp - 1 K/V hops and cp hops of
// the fp32 dK/dV sums (the last one home).
Passes local_ring_cpu(const CostContext& c) {
  const HardwareProfile& hw = c.r.hardware;
  const double floats = c.N * (c.w.kv + c.w.v) / c.t, cp = c.l.cp;
  const double kv = hw.cp_hop_s + floats * (c.local_bf16 ? 2 : 4) * hw.cp_hop_byte_s;
  const double grads = hw.cp_hop_s + floats * 4 * hw.cp_hop_byte_s;
  return {(cp - 1) * kv, (cp - 1) * kv + cp * grads, 0};
}

}  // namespace

// Context parallelism's K/V exchange in one layer (docs/contracts.md §11). Ring: each of the
// cp - 1 steps passes one rank's K and V block to the next rank while the attention of the
// block in hand computes (1/cp of the rank's attention), only the excess exposed; backward
// passes the K/V and their gradients, twice the bytes, under 1/cp of the attention's
// backward (locally, where calibrated: the hops' CPU instead, local_ring_cpu). All-gather
// (Llama 3): K and V gathered before the attention, exposed, again for the backward, and
// their gradients reduce-scattered after it.
Passes cp_exchange(const CostContext& c, const Passes& core) {
  if (c.l.cp <= 1) return {};
  const HardwareProfile& hw = c.r.hardware;
  const double kv = c.N * (c.w.kv + c.w.v) / c.t * c.e, cp = c.l.cp;
  if (c.l.cp_comm == CpComm::ring && cp_hops_calibrated(hw)) return local_ring_cpu(c);
  if (c.l.cp_comm == CpComm::allgather) {
    const double ag = collective_seconds(hw, Collective::all_gather, kv * cp, c.cp);
    const double rs = collective_seconds(hw, Collective::reduce_scatter, kv * cp, c.cp);
    return {ag, ag + rs, 0};
  }
  const bool across = c.cp.nodes > 1;
  const double fwd = p2p_seconds(hw, kv, across), bwd = p2p_seconds(hw, 2 * kv, across);
  return {(cp - 1) * std::max(0.0, fwd - core.forward / cp),
          (cp - 1) * std::max(0.0, bwd - core.backward / cp), 0};
}

Passes head_compute(const CostContext& c, double ce, double ce_bwd) {
  const ComputeRates& R = c.rates;
  const double N = c.N, h = c.h;
  const double Vl = double(tp::padded_vocab(c.r.model.vocab, c.l.tp)) / c.l.tp;
  const Passes logits = linear_passes(c, R, N, {{Vl, h}}, false);
  const double ln = pointwise_seconds(R, N * h, 2 * N * h * c.e, 1);
  return {logits.forward + ce + ln, logits.backward + ce_bwd + 2 * ln,
          linear_gemm(c, R, Vl, h, N) * R.weight_grad_ratio};
}

double cross_entropy_comm(const CostContext& c) {
  if (c.l.tp <= 1) return 0;
  return 3 * collective_seconds(c.r.hardware, Collective::all_reduce, c.N * 4, c.tp);
}

BlockCosts finish_block(const CostContext& c, Passes p, double core_forward, double tp_comm,
                        double ep_comm) {
  BlockCosts k;
  k.tp_comm = tp_comm;
  k.ep_comm = ep_comm;
  p.forward += ep_comm / 2;
  p.backward += ep_comm / 2;
  if (c.l.recompute == Recompute::selective) k.recompute = core_forward;
  if (c.l.recompute == Recompute::full) k.recompute = p.forward;
  p.backward += k.recompute;
  k.passes = p;
  return k;
}

}  // namespace mt::plan
