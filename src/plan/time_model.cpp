#include "plan/time_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "model/block.h"
#include "model/moe_layer.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "parallel/pipeline/schedule_simulator.h"
#include "parallel/pipeline/stage_chunks.h"
#include "parallel/tensor_parallel/vocab_parallel.h"
#include "plan/hardware_costs.h"

namespace mt::plan {

namespace {

// Local: whether the profile has the MoE layer's calibrated costs for the precision (older
// profiles keep the stream model below).
bool moe_calibrated(const HardwareProfile& hw, bool bf16) {
  return bf16 ? hw.moe_fwd_s_bf16 > 0 && hw.moe_bwd_s_bf16 > 0 && hw.moe_wgt_s_bf16 > 0
              : hw.moe_fwd_s > 0 && hw.moe_bwd_s > 0 && hw.moe_wgt_s > 0;
}

}  // namespace

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

namespace {

// One block's costs for one microbatch of b sequences.
struct BlockCosts {
  double forward = 0, backward = 0, weight = 0;
  double tp_comm = 0, ep_comm = 0;  // per direction pair (forward + backward), in the above
  double recompute = 0;             // forward work repeated in the backward
};

struct Context {
  const PlanRequest& r;
  const Layout& l;
  ComputeRates rates;
  double e = 4;  // bytes per activation element
  GroupSpan tp, dp, ep;
  // Local hardware: the fp32 rates (the MoE router stays fp32 under bf16) and whether the
  // engine's bf16 path runs (its GEMMs, conversions and bf16 gathers).
  ComputeRates rates32;
  bool local_bf16 = false;
  double moe_busiest = 1;  // local: busiest_rank_load for the layout's ep
};

// A GEMM of the precision's linear layers: locally the calibrated GEMM path (sgemm or
// oneDNN's bf16 matmul), on GPUs the preset's roofline.
double linear_gemm(const Context& c, const ComputeRates& R, double M, double N, double K,
                   double count = 1) {
  if (c.r.hardware.local) return local_gemm_seconds(R, M, N, K, count);
  return gemm_seconds(R, M, N, K, c.e, count);
}

// Local: a block's tensor-parallel communication per microbatch, as the engine's linears
// issue it (parallel/tensor_parallel/*_linear.cpp). Without SP: two all-reduces of (N, h)
// in forward (row-parallel outputs) and two in backward (column-parallel input
// gradients). With SP: forward all-gathers the two column inputs and reduce-scatters the
// two row outputs; backward all-gathers the two row output gradients and reduce-scatters
// the two column input gradients; the weight pass gathers all four again. The gathers
// move bf16 under --precision bf16, the reductions stay fp32. {forward, backward, weight}.
struct TpComm {
  double forward = 0, backward = 0, weight = 0;
};
TpComm local_tp_comm(const Context& c) {
  const double N = double(c.l.micro_batch) * c.r.model.seq, h = c.r.model.dim;
  const HardwareProfile& hw = c.r.hardware;
  TpComm t;
  if (c.l.tp <= 1) return t;
  if (!c.l.sequence_parallel) {
    const double ar = collective_seconds(hw, Collective::all_reduce, N * h * 4, c.tp);
    t.forward = t.backward = 2 * ar;
    return t;
  }
  const double gather_bytes = N * h * (c.local_bf16 ? 2 : 4);
  const double ag = collective_seconds(hw, Collective::all_gather, gather_bytes, c.tp);
  const double rs = collective_seconds(hw, Collective::reduce_scatter, N * h * 4, c.tp);
  t.forward = t.backward = 2 * (ag + rs);
  t.weight = 4 * ag;
  return t;
}

BlockCosts block_costs(const Context& c, int layer) {
  const ModelConfig& m = c.r.model;
  const double b = c.l.micro_batch, s = m.seq, h = m.dim, a = m.heads, t = c.l.tp;
  const double N = b * s, Nl = c.l.sequence_parallel ? N / t : N, hd = h / a, e = c.e;
  const ComputeRates& R = c.rates;
  auto gemm = [&](double M, double Nn, double K, double count = 1) {
    return linear_gemm(c, R, M, Nn, K, count);
  };
  // The MoE router stays an fp32 GEMM under bf16 locally; the experts' MLPs are bf16
  // (docs/precision.md).
  const ComputeRates& RR = c.local_bf16 ? c.rates32 : R;
  auto router_gemm = [&](double M, double Nn, double K) { return linear_gemm(c, RR, M, Nn, K); };
  auto expert_gemm = [&](double M, double Nn, double K, double count = 1) {
    return linear_gemm(c, R, M, Nn, K, count);
  };
  BlockCosts k;
  // Attention: qkv and output projection (column-, then row-parallel).
  double f = gemm(N, 3 * h / t, h) + gemm(N, h, h / t);
  // Input gradients: the same shapes; locally times the calibrated backward/forward ratio
  // of the GEMM path (1 on GPUs and for profiles without it).
  const double rin = R.input_grad_ratio, rw = R.weight_grad_ratio;
  double bwd = f * rin;
  double w = (gemm(3 * h / t, h, N) + gemm(h, h / t, N)) * rw;  // weight gradients
  // Attention core: (b * a / t) heads of QK^T (s x s x hd) and PV (s x hd x s), softmax.
  const double heads = b * a / t;
  double core = gemm(s, s, hd, heads) + gemm(s, hd, s, heads) +
                pointwise_seconds(R, heads * s * s, 2 * heads * s * s * e, 2);
  double core_bwd = 2 * core;  // dP, dV, then dQ, dK; softmax backward
  if (R.attention_fwd > 0 && R.attention_bwd > 0) {
    // The engine's own attention kernel, as calibrated (4 b s^2 h/t FLOPs forward).
    const double flops = 4 * b * s * s * h / t;
    core = flops / R.attention_fwd + R.overhead_s;
    core_bwd = 2 * flops / R.attention_bwd + R.overhead_s;
  }
  const HardwareProfile& hw = *R.hw;
  if (hw.dropout && !hw.local) {
    // Dropout on the attention probabilities (a separate pass after the fused softmax:
    // read, write and a 1-byte mask per element; its backward reads the gradient and the
    // mask and writes). Part of the core, so selective recomputation repeats it too.
    const double elems = heads * s * s, bytes = elems * (2 * e + 1);
    core += pointwise_seconds(R, elems, bytes, 1);
    core_bwd += pointwise_seconds(R, elems, bytes, 1);
  }
  f += core;
  bwd += core_bwd;
  // LayerNorms, residual adds (on Nl rows under SP), bias + GELU.
  const double ln = pointwise_seconds(R, Nl * h, 2 * Nl * h * e, 1);
  const double residual = stream_seconds(R, 3 * Nl * h * e, 1);
  f += 2 * ln + 2 * residual;
  bwd += 2 * 2 * ln + 2 * residual;
  if (hw.dropout && !hw.local) {
    // The fused bias-dropout-add of both residual branches also writes (forward) and
    // reads (backward) a 1-byte mask per element.
    f += 2 * stream_seconds(R, Nl * h, 0);
    bwd += 2 * stream_seconds(R, Nl * h, 0);
  }
  const bool moe = is_moe_layer(m, layer);
  double mlp_f = 0, mlp_b = 0, mlp_w = 0;
  if (!moe) {
    const double gelu = pointwise_seconds(R, N * 4 * h / t, 2 * N * 4 * h / t * e, 1);
    const double mlp_gemms = gemm(N, 4 * h / t, h) + gemm(N, h, 4 * h / t);
    mlp_f = mlp_gemms + gelu;
    mlp_b = mlp_gemms * rin + 2 * gelu;
    mlp_w = (gemm(4 * h / t, h, N) + gemm(h, 4 * h / t, N)) * rw;
  } else if (hw.local && moe_calibrated(hw, c.local_bf16)) {
    // The engine's MoE layer (model/moe_layer.cpp): the fp32 router, each local expert's
    // GEMMs over its rows (bf16: over row chunks), the rest of the layer at its calibrated
    // cost per hidden element (local_moe_costs). With expert parallelism every exchange
    // waits for the busiest ep rank: its rows are the mean (N topk) times
    // busiest_rank_load (the calibrated load spread), spread evenly over its experts.
    const double E = m.experts, local = E / c.l.ep;
    const double rows = N * m.topk * c.moe_busiest;
    const MoeCosts mc =
        local_moe_costs(R, RR, std::vector<double>(size_t(local), rows / local), N, E, h, 4 * h,
                        c.local_bf16, MoeLayer::bf16_chunk_rows(int(N)));
    mlp_f = mc.forward;
    mlp_b = mc.backward;
    mlp_w = mc.weight;
    if (c.l.ep > 1) {
      // regroup_blocks twice each way (to expert-major after the dispatch, back before the
      // combine; the same in backward): a read and a write of the rank's rows.
      const double regroup = stream_seconds(R, 2 * rows * h * 4, 2);
      mlp_f += regroup;
      mlp_b += regroup;
      // dispatch + combine in forward, their adjoints in backward: fp32 rows, the busiest
      // rank's.
      k.ep_comm = 4 * collective_seconds(hw, Collective::all_to_all, rows * h * 4, c.ep);
    }
  } else {
    // Router, then the rank's E/ep experts on the rows routed to them (balanced: every
    // rank receives N * topk rows in total), GELU MLPs of the dense shape.
    const double E = m.experts, local = E / c.l.ep, rows = N * m.topk / local;
    const double gelu =
        pointwise_seconds(R, N * m.topk * 4 * h, 2 * N * m.topk * 4 * h * e, int(local));
    mlp_f = router_gemm(N, E, h) + expert_gemm(rows, 4 * h, h, local) +
            expert_gemm(rows, h, 4 * h, local) + gelu +
            stream_seconds(R, 4 * N * m.topk * h * e, 4);  // permute / combine
    mlp_b = mlp_f + gelu;
    mlp_w = expert_gemm(4 * h, h, rows, local) + expert_gemm(h, 4 * h, rows, local) +
            router_gemm(E, h, N);
    if (c.l.ep > 1) {
      // dispatch + combine in forward, their adjoints in backward.
      k.ep_comm = 4 * collective_seconds(*R.hw, Collective::all_to_all, N * m.topk * h * e, c.ep);
    }
  }
  f += mlp_f;
  bwd += mlp_b;
  w += mlp_w;
  if (c.local_bf16) {
    // The engine's bf16 block (model/block.cpp, row_parallel_linear.cpp): every GEMM input
    // kept for backward is rounded once: forward ln1_out, ln2_out (Nl h each), att_out
    // (N h/t), fc_out (4 N h/t); backward the two row-parallel output gradients (Nl h
    // each), d_fc (4 N h/t) and d_qkv (3 N h/t); the weight pass rounds the row-parallel
    // output gradients again. An MoE block rounds its attention's and, for its experts
    // (moe_layer.cpp), the dispatched rows and GELU outputs (N topk h, 4 N topk h) forward
    // and their gradients (the same) backward.
    const double per_t = N * h / t;
    if (!moe) {
      f += local_convert_seconds(R, 2 * Nl * h + 5 * per_t, 4);
      bwd += local_convert_seconds(R, 2 * Nl * h + 7 * per_t, 4);
      w += local_convert_seconds(R, 2 * Nl * h, 2);
    } else {
      // (Calibrated MoE layers hold their experts' roundings in moe_*_s_bf16.)
      const double rows = moe_calibrated(*R.hw, true) ? 0.0 : N * m.topk * h;
      f += local_convert_seconds(R, Nl * h + per_t + 5 * rows, 4);
      bwd += local_convert_seconds(R, Nl * h + 3 * per_t + 5 * rows, 4);
      w += local_convert_seconds(R, Nl * h, 1);
    }
  }
  if (!R.hw->local) {
    // Bias gradients: each linear's output gradient summed over its rows, a memory-bound
    // read (qkv and fc1 column-parallel: 3h/t and 4h/t wide; proj and fc2: h wide on the
    // rank's rows). Megatron computes them as grad_output.sum(0) in the backward.
    const double cols = 3 * h / t + (moe ? 0.0 : 4 * h / t);
    w += stream_seconds(R, (N * cols + 2 * Nl * h) * e, moe ? 3 : 4);
  }
  if (t > 1 && c.r.hardware.local) {
    const TpComm tc = local_tp_comm(c);
    k.tp_comm = tc.forward + tc.backward + tc.weight;
    f += tc.forward;
    bwd += tc.backward;
    w += tc.weight;
  } else if (t > 1) {
    // Megatron: two all-reduces of (N, h) per block in forward and two in backward; with
    // SP an all-gather + reduce-scatter pair in their place (the same bytes on the wire).
    const double bytes = N * h * e;
    // The pair costs what the all-reduce it replaces costs (nccl-tests: an all-reduce moves
    // what a reduce-scatter + all-gather of the same buffer move). Local runs take the
    // branch above (local_tp_comm: what the engine's linears send).
    const double one = c.l.sequence_parallel
                           ? (collective_seconds(*R.hw, Collective::all_gather, bytes, c.tp) +
                              collective_seconds(*R.hw, Collective::reduce_scatter, bytes, c.tp))
                           : collective_seconds(*R.hw, Collective::all_reduce, bytes, c.tp);
    double bwd_comm = 2 * one;
    if (!R.hw->local && R.hw->tp_backward_overlap) {
      // Megatron-LM 2022 (LinearWithGradAccumulationAndAsyncCommunication): in a
      // column-parallel linear's backward (qkv, fc1) the input's all-gather (SP) runs under
      // the input-gradient GEMM and the input gradient's reduce-scatter (SP) / all-reduce
      // runs under the weight-gradient GEMM; only what exceeds them is exposed. Under SP
      // the row-parallel layers' backward all-gathers (of the output gradient) stay exposed.
      std::vector<std::pair<double, double>> cols = {
          {gemm(N, 3 * h / t, h), gemm(3 * h / t, h, N)}};
      if (!moe) cols.push_back({gemm(N, 4 * h / t, h), gemm(4 * h / t, h, N)});
      const double half = one / 2;  // one all-gather or one reduce-scatter
      bwd_comm = c.l.sequence_parallel ? 2 * half : 0;
      for (const auto& [dgrad, wgrad] : cols)
        bwd_comm += c.l.sequence_parallel
                        ? std::max(0.0, half - dgrad) + std::max(0.0, half - wgrad)
                        : std::max(0.0, one - wgrad);
    }
    k.tp_comm = 2 * one + bwd_comm;
    f += 2 * one;
    bwd += bwd_comm;
  }
  f += k.ep_comm / 2;
  bwd += k.ep_comm / 2;
  if (c.l.recompute == "selective") k.recompute = core;
  if (c.l.recompute == "full") k.recompute = f;
  bwd += k.recompute;
  k.forward = f;
  k.backward = bwd;
  k.weight = w;
  return k;
}

Context make_context(const PlanRequest& r, const Layout& l) {
  // Locally bf16 rounds only the GEMM inputs: activations, reductions and pointwise passes
  // stay fp32 (4 bytes); the GEMM path's own operand bytes are in the rates.
  const bool local = r.hardware.local;
  Context c{r,
            l,
            compute_rates(r.hardware, l.precision, l.world(), r.threads),
            l.precision == "bf16" && !local ? 2.0 : 4.0,
            {},
            {},
            {},
            {},
            local && l.precision == "bf16"};
  if (local) c.rates32 = compute_rates(r.hardware, "fp32", l.world(), r.threads);
  if (local && r.model.experts > 0) c.moe_busiest = busiest_rank_load(r.hardware, r.model, l.ep);
  c.tp = group_span(r.hardware, l.tp, 1);
  c.dp = group_span(r.hardware, l.dp, l.tp);
  c.ep = group_span(r.hardware, l.ep, l.tp);
  return c;
}

// Parameters of one block on one rank (tp-split matrices, replicated LayerNorms and biases).
double block_params(const ModelConfig& m, int layer, const Layout& l, double* experts) {
  const double h = m.dim, t = l.tp;
  double p = 4 * h + 4 * h * h / t + 3 * h / t + h;  // ln_1, ln_2, attention
  if (is_moe_layer(m, layer)) {
    const double ex = double(m.experts) / l.ep * (8 * h * h + 5 * h);
    *experts += ex;
    p += m.experts * h + ex;
  } else {
    p += 8 * h * h / t + 4 * h / t + h;
  }
  return p;
}

}  // namespace

std::vector<StageCosts> stage_costs(const PlanRequest& r, const Layout& l) {
  const Context c = make_context(r, l);
  const ModelConfig& m = r.model;
  std::vector<int> per_chunk = {m.layers};
  std::vector<ChunkSpec> whole = {{0, m.layers, true, true}};
  if (l.pp > 1) per_chunk = default_stage_layers(m, l.pp, l.virtual_stages);
  std::vector<StageCosts> out(size_t(l.pp));
  const bool accum_pass = r.hardware.grad_accum_pass && !r.hardware.local;  // Megatron 2021
  const double b = l.micro_batch, N = b * m.seq, h = m.dim, t = l.tp, e = c.e;
  const double Vl = double(tp::padded_vocab(m.vocab, l.tp)) / l.tp;
  for (int st = 0; st < l.pp; ++st) {
    StageCosts& sc = out[size_t(st)];
    const std::vector<ChunkSpec> specs = l.pp > 1 ? stage_chunk_specs(per_chunk, l.pp, st) : whole;
    bool wte = false;
    for (const ChunkSpec& spec : specs) {
      for (int layer = spec.first_layer; layer < spec.last_layer; ++layer) {
        const BlockCosts k = block_costs(c, layer);
        sc.forward += k.forward;
        sc.backward += k.backward;
        sc.weight += k.weight;
        sc.tp_comm += k.tp_comm;
        sc.ep_comm += k.ep_comm;
        sc.recompute += k.recompute;
        const double bp = block_params(m, layer, l, &sc.expert_params);
        sc.params += bp;
        // bf16 weight copies: attention (4 h^2/t) and the MLP (8 h^2/t) or the rank's
        // experts (E/ep x 8 h^2).
        sc.linear_weights +=
            4 * h * h / t +
            (is_moe_layer(m, layer) ? double(m.experts) / l.ep * 8 * h * h : 8 * h * h / t);
        ++sc.blocks;
        // The gradient-accumulation pass after each weight gradient (Megatron's DDP hook):
        // read the 16-bit gradient, read and write the reduction buffer.
        if (accum_pass)
          sc.weight += stream_seconds(c.rates, bp * (e + 2 * r.hardware.grad_reduce_bytes), 0);
      }
      if (spec.has_embedding) {
        sc.forward += stream_seconds(c.rates, 3 * N * h * e, 2);
        sc.backward += stream_seconds(c.rates, 3 * N * h * e, 2);
        sc.params += double(m.seq) * h;
        if (!wte) sc.params += Vl * h, wte = true;
        if (t > 1 && r.hardware.local && l.sequence_parallel) {
          // vocab_parallel_embedding.cpp under SP: reduce-scatter forward, all-gather back.
          const double rs =
              collective_seconds(r.hardware, Collective::reduce_scatter, N * h * 4, c.tp);
          const double ag = collective_seconds(r.hardware, Collective::all_gather, N * h * 4, c.tp);
          sc.forward += rs, sc.backward += ag, sc.tp_comm += rs + ag;
        } else if (t > 1) {
          const double ar = collective_seconds(r.hardware, Collective::all_reduce, N * h * e, c.tp);
          sc.forward += ar, sc.tp_comm += ar;
        }
      }
      if (spec.has_head) {
        // ln_f, the logits GEMM against the (vocab-parallel) tied embedding, the
        // cross-entropy over N x V/tp logits, and their backward.
        const double logits = linear_gemm(c, c.rates, N, Vl, h);
        double ce = pointwise_seconds(c.rates, N * Vl, 3 * N * Vl * e, 3), ce_bwd = ce;
        if (r.hardware.fp32_cross_entropy && !r.hardware.local) {
          // Megatron: output.float() (read e, write 4), then max (4), subtract (8), exp
          // (8), sum (4), divide (8) per logit; backward: scale the saved softmax (8) and
          // cast the gradient back (4 + e).
          ce = pointwise_seconds(c.rates, N * Vl, N * Vl * (e + 4 + 32), 6);
          ce_bwd = pointwise_seconds(c.rates, N * Vl, N * Vl * (12 + e), 2);
        }
        const double ln = pointwise_seconds(c.rates, N * h, 2 * N * h * e, 1);
        sc.forward += logits + ce + ln;
        sc.backward += logits * c.rates.input_grad_ratio + ce_bwd + 2 * ln;
        sc.weight += linear_gemm(c, c.rates, Vl, h, N) * c.rates.weight_grad_ratio;
        if (c.local_bf16) {
          // lm_head.cpp: ln_f's output rounded in forward, dlogits in B and again in W.
          const double Nl = l.sequence_parallel ? N / t : N;
          sc.forward += local_convert_seconds(c.rates, Nl * h);
          sc.backward += local_convert_seconds(c.rates, N * Vl);
          sc.weight += local_convert_seconds(c.rates, N * Vl);
        }
        sc.params += 2 * h;
        if (!wte) sc.params += Vl * h, wte = true;
        sc.linear_weights += Vl * h;
        if (t > 1 && r.hardware.local) {
          // The head is a column-parallel linear: its input gradient is all-reduced (SP:
          // ln_f's output all-gathered in forward, the gradient reduce-scattered).
          const double ge = c.local_bf16 ? 2 : 4;
          if (l.sequence_parallel) {
            const double ag =
                collective_seconds(r.hardware, Collective::all_gather, N * h * ge, c.tp);
            const double rs =
                collective_seconds(r.hardware, Collective::reduce_scatter, N * h * 4, c.tp);
            sc.forward += ag, sc.backward += rs, sc.tp_comm += ag + rs;
          } else {
            const double ar =
                collective_seconds(r.hardware, Collective::all_reduce, N * h * 4, c.tp);
            sc.backward += ar, sc.tp_comm += ar;
          }
        }
        if (t > 1) {
          // vocab-parallel cross-entropy: max, sum and target logit reduced over tp.
          const double small =
              3 * collective_seconds(r.hardware, Collective::all_reduce, N * 4, c.tp);
          sc.forward += small, sc.tp_comm += small;
        }
      }
    }
    if (r.hardware.local && c.rates.microbatch_weight_s > 0) {
      // What a real step pays per microbatch and weight element beyond its kernels
      // (solved together with the step factor, calibrate.cpp), spread over the three
      // passes that each use every weight once.
      const double mw = sc.linear_weights * c.rates.microbatch_weight_s;
      sc.forward += mw / 3, sc.backward += mw / 3, sc.weight += mw / 3;
    }
  }
  return out;
}

PredictedTime predict_time(const PlanRequest& r, const Layout& l, const Schedule& schedule,
                           double give_up_above) {
  const HardwareProfile& hw = r.hardware;
  if (hw.local && r.backend == "local" && hw.oversubscribed_latency_s > 0 &&
      double(l.world()) * r.threads > hw.cores &&
      hw.intra_latency_s != hw.oversubscribed_latency_s) {
    // More rank threads than cores: a waiting rank blocks until a peer that was not
    // running arrives (comm/local/doorbell.h), so every collective and send pays the
    // calibrated oversubscribed latency instead of the spinning one.
    PlanRequest o = r;
    o.hardware.intra_latency_s = o.hardware.inter_latency_s = hw.oversubscribed_latency_s;
    return predict_time(o, l, schedule, give_up_above);
  }
  if (hw.local && hw.cores > 0 && double(l.world()) * r.threads > hw.cores) {
    // More rank threads than cores time-share them (processor sharing): the costs are those
    // of every rank at full speed; a rank that waits, in a pipeline bubble or for a peer,
    // blocks and leaves its core to one that can run. The pipeline is replayed with the
    // computing stages sharing the cores (shared_cores_makespan: a pp 4 pipeline of one
    // microbatch on 2 cores runs its stages one after another at full speed; 1f1b's warm-up
    // and cool-down, where fewer stages compute than there are cores, waste the rest);
    // without pp every rank computes throughout. What follows the pipeline (the dp
    // reduction, the optimizer, the weight copies) runs on every rank at once.
    PlanRequest u = r;
    u.hardware.cores = l.world() * r.threads;
    PredictedTime p = predict_time(u, l, schedule, give_up_above);
    if (p.pruned) return p;
    const double slowdown = double(l.world()) * r.threads / hw.cores;
    const double width = double(l.dp) * l.tp * r.threads;
    double pipeline = p.pipeline_s * slowdown;
    if (l.pp > 1) {
      std::vector<OpCosts> costs;
      for (const StageCosts& sc : p.stages) {
        const double v = l.virtual_stages;
        costs.push_back({sc.forward / v, sc.backward / v, sc.weight / v, p.pp_p2p_s});
      }
      pipeline = shared_cores_makespan(schedule, costs, width, hw.cores);
    }
    p.step_s = pipeline + (p.dp_exposed_s + p.optimizer_s + p.bf16_weights_s) * slowdown;
    return p;
  }
  const Context c = make_context(r, l);
  const ModelConfig& m = r.model;
  PredictedTime p;
  p.stages = stage_costs(r, l);
  const int mb = microbatches(r, l);
  const double N = double(l.micro_batch) * m.seq, h = m.dim;
  // ZeRO 3: every block's parameters are gathered before its forward and again before its
  // backward, per microbatch, and its gradient reduce-scattered; prefetch overlaps that
  // with compute, so only what exceeds the compute of the same pass is exposed.
  if (l.zero == 3 && l.dp > 1) {
    for (StageCosts& sc : p.stages) {
      // One gather (and one reduce-scatter) per block, as the engine does: each pays the
      // collective's latency.
      const double units = std::max(sc.blocks, 1), bytes = sc.params * 4 / units;
      const double gather =
          units * collective_seconds(r.hardware, Collective::all_gather, bytes, c.dp);
      const double scatter =
          units * collective_seconds(r.hardware, Collective::reduce_scatter, bytes, c.dp);
      const double overlap = r.hardware.local ? 0.0 : 1.0;
      const double fwd = std::max(0.0, gather - overlap * sc.forward);
      const double bwd = std::max(0.0, gather + scatter - overlap * (sc.backward + sc.weight));
      sc.forward += fwd;
      sc.backward += bwd;
      p.zero3_exposed_s = std::max(p.zero3_exposed_s, (fwd + bwd) * mb);
    }
  }
  double bound = 0;
  for (const StageCosts& sc : p.stages)
    bound = std::max(bound, mb * (sc.forward + sc.backward + sc.weight));
  if (bound > give_up_above) {
    p.pruned = true;
    p.step_s = bound;
    return p;
  }
  // Pipeline: the simulator with each stage's costs per local chunk.
  const double boundary = N * h * c.e / (l.sequence_parallel ? l.tp : 1);
  const bool across = !r.hardware.local && l.tp * l.dp * l.pp > r.hardware.devices_per_node;
  p.pp_p2p_s = l.pp > 1 ? p2p_seconds(r.hardware, boundary, across) : 0;
  const bool gpu = !r.hardware.local;
  if (gpu && l.pp > 1 && r.hardware.p2p_scatter_gather && l.tp > 1 && !l.sequence_parallel) {
    // Megatron's scatter/gather: each tp rank sends 1/tp of the boundary over its own
    // link, the receiver all-gathers it over tp (NVLink).
    p.pp_p2p_s = p2p_seconds(r.hardware, boundary / l.tp, across) +
                 collective_seconds(r.hardware, Collective::all_gather, boundary, c.tp);
  }
  // Blocking p2p (Megatron: batch_isend_irecv, wait, cuda.synchronize): every chunk's
  // forward and backward also pays the transfer on its own timeline; the data is there
  // when the sender's op ends (no separate latency).
  const bool blocking = gpu && r.hardware.p2p_blocking;
  if (l.pp > 1) {
    std::vector<OpCosts> costs;
    for (const StageCosts& sc : p.stages) {
      const double v = l.virtual_stages;
      if (blocking)
        costs.push_back(
            {sc.forward / v + p.pp_p2p_s, sc.backward / v + p.pp_p2p_s, sc.weight / v, 0.0});
      else
        costs.push_back({sc.forward / v, sc.backward / v, sc.weight / v, p.pp_p2p_s});
    }
    const Timeline tl = simulate_schedule(schedule, costs);
    MT_CHECK(!tl.deadlocked);
    p.pipeline_s = tl.makespan;
    p.bubble = tl.bubble();
  } else {
    const StageCosts& sc = p.stages[0];
    p.pipeline_s = mb * (sc.forward + sc.backward + sc.weight);
  }
  // The slowest stage decides what follows the pipeline.
  double dp_exposed = 0, opt = 0, tp_exp = 0, ep_exp = 0, recompute = 0;
  for (int st = 0; st < l.pp; ++st) {
    const StageCosts& sc = p.stages[size_t(st)];
    tp_exp = std::max(tp_exp, sc.tp_comm * mb);
    ep_exp = std::max(ep_exp, sc.ep_comm * mb);
    // Gradient reduction over dp in fp32 (experts over dp / ep), bucketed and started as
    // backward produces the buckets: it overlaps the last microbatch's backward (the
    // earlier ones only accumulate). The local backend's collectives run on the ranks'
    // own cores, so nothing overlaps there. ZeRO 1/2: reduce-scatter + all-gather of the
    // updated parameters (the same bytes as an all-reduce; the gather after the step is
    // exposed); ZeRO 3 reduces per microbatch above.
    double reduce = 0, after = 0;
    // Bytes per reduced gradient element: fp32 unless the software reduces 16-bit buffers.
    const double gb = r.hardware.local ? 4.0 : r.hardware.grad_reduce_bytes;
    const double dense = (sc.params - sc.expert_params) * gb, experts = sc.expert_params * gb;
    const int expert_dp = l.dp / l.ep;
    const GroupSpan edp = group_span(r.hardware, expert_dp, l.tp * l.ep);
    if (l.dp > 1 && l.zero < 3) {
      if (l.zero == 0) {
        reduce = collective_seconds(r.hardware, Collective::all_reduce, dense, c.dp);
      } else {
        reduce = collective_seconds(r.hardware, Collective::reduce_scatter, dense, c.dp);
        after = collective_seconds(r.hardware, Collective::all_gather, dense, c.dp);
      }
    }
    if (expert_dp > 1 && l.zero < 3)
      reduce += collective_seconds(r.hardware, Collective::all_reduce, experts, edp);
    // dp_overlap: the fraction of the reduction the software runs under the last
    // microbatch's backward (Megatron-LM before --overlap-grad-reduce: none).
    const double window =
        r.hardware.local ? 0.0 : r.hardware.dp_overlap * (sc.backward + sc.weight);
    dp_exposed = std::max(dp_exposed, std::max(0.0, reduce - window) + after);
    // AdamW over the elements this rank updates, plus the gradient-norm pass:
    // ~32 bytes per element streamed (param, grad, two moments read; param, moments
    // written); on GPUs the software profile's count (Megatron's fp16 optimizer: 50-54).
    const double updated =
        l.zero > 0 ? (sc.params - sc.expert_params) / l.dp + sc.expert_params : sc.params;
    // Locally the step also checks the updated parameters and moments for finiteness (12
    // bytes read), reads the gradients for the norm (4) and zeroes them (4 written): 52.
    const double per_elem = r.hardware.local ? 52.0 : r.hardware.optimizer_bytes;
    opt = std::max(opt, stream_seconds(c.rates, updated * per_elem, r.hardware.local ? 4 : 2));
  }
  if (!r.hardware.local && l.pp > 1) {
    // The tied embedding: its gradient is summed between the first and the last stage
    // (V/tp x h per rank) after the pipeline and before the optimizer, on the critical
    // path (every rank waits for it at the gradient-norm all-reduce).
    const double Vl = double(tp::padded_vocab(m.vocab, l.tp)) / l.tp;
    const GroupSpan ends = group_span(r.hardware, 2, l.tp * l.dp * (l.pp - 1));
    dp_exposed += collective_seconds(r.hardware, Collective::all_reduce,
                                     Vl * h * r.hardware.grad_reduce_bytes, ends);
  }
  // Recomputation on the slowest stage (reported; already inside the backward costs).
  for (const StageCosts& sc : p.stages) recompute = std::max(recompute, sc.recompute * mb);
  // Gradient-norm all-reduce over the world and the loss all-reduce: latency-bound.
  const GroupSpan world = group_span(r.hardware, l.world(), 1);
  // (Locally a third: the ranks agree that the update left every weight finite.)
  const double small =
      (r.hardware.local ? 3 : 2) * collective_seconds(r.hardware, Collective::all_reduce, 8, world);
  p.tp_exposed_s = tp_exp;
  p.ep_exposed_s = ep_exp;
  p.dp_exposed_s = dp_exposed;
  p.optimizer_s = opt + small;
  p.recompute_s = recompute;
  if (c.local_bf16) {
    // Each linear's bf16 weight copy is rounded at its first use after the weights change
    // (parallel/tensor_parallel/bf16_weight.h): once per step, on the slowest stage's cores.
    for (const StageCosts& sc : p.stages)
      p.bf16_weights_s = std::max(
          p.bf16_weights_s, local_convert_seconds(c.rates, sc.linear_weights, 4 * sc.blocks + 1));
  }
  p.step_s = p.pipeline_s + dp_exposed + p.optimizer_s + p.bf16_weights_s;
  return p;
}

double shared_cores_makespan(const Schedule& s, const std::vector<OpCosts>& costs, double width,
                             double cores) {
  MT_CHECK(int(s.actions.size()) == s.stages && int(costs.size()) == s.stages);
  const size_t P = size_t(s.stages);
  std::vector<size_t> pc(P, 0);
  std::vector<double> left(P, -1);  // full-speed seconds left of the running action; -1: none
  std::map<MessageKey, double> arrival;
  double now = 0;
  for (;;) {
    // Every stage runs its sends and arrived receives and starts its next computation (until
    // none can: a send may release a receive of a stage already passed).
    double next_arrival = 1e300;
    bool done = true;
    for (bool progress = true; progress;) {
      progress = false;
      next_arrival = 1e300;
      done = true;
      for (size_t st = 0; st < P; ++st) {
        const auto& list = s.actions[st];
        for (; pc[st] < list.size() && left[st] < 0; ++pc[st]) {
          const Action& a = list[pc[st]];
          if (is_recv(a.kind)) {
            auto it = arrival.find(message_key(s, int(st), a));
            if (it == arrival.end()) break;
            if (it->second > now) {
              next_arrival = std::min(next_arrival, it->second);
              break;
            }
          } else if (is_send(a.kind)) {
            arrival.emplace(message_key(s, int(st), a), now + costs[st].latency);
          } else {
            left[st] = action_cost(s, a.kind, costs[st]);
            progress = true;
            break;
          }
          progress = true;
        }
        done = done && pc[st] == list.size();
      }
    }
    if (done) return now;
    int running = 0;
    for (size_t st = 0; st < P; ++st) running += left[st] >= 0;
    const double rate = running ? std::min(1.0, cores / (running * width)) : 1.0;
    double dt = next_arrival - now;
    for (size_t st = 0; st < P; ++st)
      if (left[st] >= 0) dt = std::min(dt, left[st] / rate);
    MT_CHECK(dt < 1e299, "shared_cores_makespan: the schedule deadlocks");
    now += dt;
    for (size_t st = 0; st < P; ++st) {
      if (left[st] < 0) continue;
      left[st] -= dt * rate;
      if (left[st] <= 1e-15) left[st] = -1, ++pc[st];  // finished: on to its next action
    }
  }
}

std::vector<std::string> time_assumptions(const PlanRequest& r) {
  std::vector<std::string> a = {
      "per block and microbatch: qkv, projection and two MLP GEMMs (tp-split), the attention "
      "core as batched GEMMs over b*heads/tp, LayerNorm/residual/GELU/softmax as memory-bound "
      "passes; backward = input-gradient GEMMs (B) + weight-gradient GEMMs (W), attention "
      "core backward 2x its forward",
      "model FLOPs (MFU numerator): Korthikanti et al. 2022 App. A, recomputation not counted",
      "GPU: each linear's bias gradient is a memory-bound pass over its output gradient "
      "(in W)",
      "tensor parallel: 2 all-reduces forward + 2 backward per block of (b*s, h) activations "
      "(SP: all-gather + reduce-scatter pairs, same bytes); not overlapped with compute",
      "pipeline: the engine's schedule simulator with each stage's F/B/W costs (its blocks, "
      "the embedding on the first, ln_f + logits + cross-entropy on the last); p2p transfer "
      "of (b*s, h) [/tp under SP] as the send->receive latency; interleaved: a stage's cost "
      "split evenly over its chunks",
      "recompute: selective repeats the attention core's forward in backward, full the whole "
      "block's forward (with its tp communication)",
      "MoE (GPU, and local profiles without MoE figures): router GEMM, balanced routing "
      "(N*topk rows over the rank's E/ep experts), two all-to-alls forward and two backward "
      "over ep; not overlapped",
      "ZeRO 3: parameter all-gather before forward and backward and gradient reduce-scatter "
      "per microbatch, prefetched: only what exceeds that pass's compute is exposed",
      "AdamW and the gradient-norm pass: 32 bytes streamed per updated element; plus two "
      "latency-bound world all-reduces (grad norm, loss)"};
  if (r.hardware.local) {
    a.push_back(
        "local backend: collectives are computed by the ranks' own threads on shared memory, "
        "so no communication overlaps compute; ranks x threads beyond the calibrated cores "
        "time-share them: the pipeline is replayed with the computing stages sharing the "
        "cores (processor sharing; a waiting rank blocks), what follows it runs on every "
        "rank at once, and collectives pay the oversubscribed latency; tp communication as "
        "the engine's linears issue it (SP: the weight "
        "pass gathers its inputs and output gradients again)");
    a.push_back(
        "local bf16: the linears' and MoE experts' GEMMs on oneDNN's bf16 matmul (calibrated "
        "peak, penalty, "
        "overhead), attention core as calibrated for a bf16 run, every GEMM input kept for "
        "backward rounded to bf16 once (output gradients of row-parallel linears once per "
        "pass), weight copies rounded once per step; MoE router, LayerNorm, GELU, softmax, "
        "reductions and AdamW stay fp32");
    if (r.hardware.microbatch_weight_s > 0 || r.hardware.microbatch_weight_s_bf16 > 0)
      a.push_back(
          "local: every microbatch also pays the calibrated per-microbatch cost for each linear "
          "weight element on the rank (microbatch_weight_s*, fitted with the step factor to "
          "the reference step in 1, 2, 4 and 8 microbatches), a third in each of F, B and W");
    if (r.hardware.moe_fwd_s > 0)
      a.push_back(
          "local MoE: the fp32 router GEMMs, each local expert's GEMMs over its rows (bf16: over "
          "the layer's row chunks of 64 x 2^j rows, the last split into matmul_bf16's row "
          "pieces, padded to 64 for the weight gradients), the rest of the "
          "layer (routing, permutations, GELU, roundings) at its calibrated cost per expert "
          "hidden element; with ep the busiest rank's rows: N topk x (1 + cv sqrt(E/(E-1)) / "
          "sqrt(E/ep) x E[max of ep normals]), cv the calibrated load spread");
  } else {
    a.push_back(
        "data parallel: gradients (grad_reduce_bytes per element) reduced in buckets; "
        "dp_overlap of the reduction may hide under the last microbatch's B+W, the rest is "
        "exposed; ZeRO 1/2 reduce-scatter then an exposed all-gather of the updated "
        "parameters; with pp the tied embedding's gradient all-reduce between first and "
        "last stage follows, exposed (counted in dp exposed)");
    const HardwareProfile& hw = r.hardware;
    a.push_back(str("pipeline p2p: ",
                    hw.p2p_blocking ? "blocking (each chunk's F and B pay "
                                      "the transfer)"
                                    : "asynchronous (the transfer is the send->receive latency)",
                    hw.p2p_scatter_gather ? "; scatter/gather over tp (1/tp per link, then an "
                                            "all-gather over NVLink)"
                                          : ""));
    a.push_back(str("software ", hw.software, ": dp_overlap ", hw.dp_overlap,
                    ", grad_reduce_bytes ", hw.grad_reduce_bytes, ", dropout ",
                    hw.dropout ? "yes" : "no", ", fp32 cross-entropy ",
                    hw.fp32_cross_entropy ? "yes" : "no", ", optimizer ", hw.optimizer_bytes,
                    " bytes/element"));
    for (const std::string& line : hw.software_sources) a.push_back(line);
    a.push_back(
        "placement: tp innermost within a node, then dp, then pp (CONTRACTS.md §7); a group "
        "spanning nodes gets min(NVLink busbw, members per node x NIC busbw)");
    a.push_back(
        "memory: the engine's own estimate (fp32 master weights, fp32 grads, AdamW moments); "
        "bf16 halves activations and adds a 2-byte weight copy; 3 GiB per GPU reserved");
  }
  return a;
}

}  // namespace mt::plan
