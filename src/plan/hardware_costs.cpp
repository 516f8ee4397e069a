#include "plan/hardware_costs.h"

#include <algorithm>
#include <cmath>

#include "kernels/dense_gemm_bf16.h"
#include "kernels/grouped_gemm.h"
#include "kernels/matmul_bf16.h"
#include "model/moe_layer.h"

namespace mt::plan {

// The MoE layer's calibrated rates for a rank of `threads` threads, `unscale` its share of
// the cores with the step factor taken back out (why: below).
static void set_moe_rates(ComputeRates& r, const HardwareProfile& h, bool bf, int threads,
                          double unscale) {
  // The MoE rest is what a whole MoE layer, timed with cold caches, costs beyond its GEMMs
  // at their calibrated best; the per-microbatch cost is measured inside a real step.
  // Neither is a kernel at its best, so the step factor (what a real step adds to those)
  // is already in them: scaling them again predicted one-rank MoE steps 25-28% slow.
  r.moe_fwd_s = (bf ? h.moe_fwd_s_bf16 : h.moe_fwd_s) / (threads * unscale);
  r.moe_bwd_s = (bf ? h.moe_bwd_s_bf16 : h.moe_bwd_s) / (threads * unscale);
  r.moe_wgt_s = (bf ? h.moe_wgt_s_bf16 : h.moe_wgt_s) / (threads * unscale);
  // The grouped expert GEMMs are measured as themselves, caches emptied, as inside a step,
  // and the MoE rest is the layer's measured time less them: together they are the
  // layer's own measurement. The step factor is the dense linears' formula against a real
  // step (bf16's below 1 shows it corrects oneDNN's small-dimension formula, not a step
  // overhead): not theirs to carry.
  const double g = threads * unscale;
  r.grouped_fwd = (bf ? h.grouped_fwd_flops_bf16 : h.grouped_fwd_flops) * g;
  r.grouped_bwd = (bf ? h.grouped_bwd_flops_bf16 : h.grouped_bwd_flops) * g;
  r.grouped_wgt = (bf ? h.grouped_wgt_flops_bf16 : h.grouped_wgt_flops) * g;
  r.microbatch_weight_s =
      (bf ? h.microbatch_weight_s_bf16 : h.microbatch_weight_s) / (threads * unscale);
}

ComputeRates compute_rates(const HardwareProfile& h, Precision precision, int ranks, int threads) {
  ComputeRates r;
  r.hw = &h;
  r.peak = peak_flops(h, precision);
  r.memory_bw = h.memory_bw;
  r.overhead_s = h.kernel_overhead_s;
  if (h.local) {
    // Calibrated per thread (GEMM peak and streaming bandwidth of one thread); threads
    // beyond the calibrated cores time-share them.
    const double busy = double(ranks) * threads;
    const double cores = std::max(h.cores, 1);
    double share = busy > cores ? cores / busy : 1.0;
    // Cores computing together slow each other (calibrated parallel_efficiency at all
    // cores busy, linear in the busy cores from 1 at one).
    if (h.parallel_efficiency > 0 && cores > 1)
      share *= 1 - (1 - h.parallel_efficiency) * (std::min(busy, cores) - 1) / (cores - 1);
    // What a real step costs beyond its kernels' calibrated best (reference_steps.cpp).
    const double step = precision == Precision::bf16 ? h.step_factor_bf16 : h.step_factor_fp32;
    if (step > 0) share /= step;
    r.peak = r.peak * threads * share;
    r.memory_bw = h.memory_bw * threads * share;
    r.attention_fwd = h.attention_fwd_flops * threads * share;
    r.attention_bwd = h.attention_bwd_flops * threads * share;
    r.pointwise_s = h.pointwise_s / (threads * share);
    r.gemm_half_dim = h.gemm_half_dim;
    r.gemm_half_rows = h.gemm_half_rows;
    r.gemm_few_rows = precision == Precision::bf16 ? h.gemm_few_rows_bf16 : h.gemm_few_rows;
    r.gemm_overhead_s = h.kernel_overhead_s;
    auto ratio = [](double v) { return v > 0 ? v : 1.0; };
    r.input_grad_ratio = ratio(h.gemm_input_grad_ratio);
    r.weight_grad_ratio = ratio(h.gemm_weight_grad_ratio);
    if (precision == Precision::bf16) {
      r.input_grad_ratio = ratio(h.gemm_input_grad_ratio_bf16);
      r.weight_grad_ratio = ratio(h.gemm_weight_grad_ratio_bf16);
      // The linears' oneDNN bf16 matmul; the attention core of a bf16 run as calibrated.
      r.gemm_half_dim = h.gemm_half_dim_bf16;
      r.gemm_half_rows = h.gemm_half_rows_bf16;
      r.gemm_overhead_s = h.bf16_overhead_s;
      r.gemm_elem_bytes = 2;
      r.attention_fwd = h.attention_bf16_fwd_flops * threads * share;
      r.attention_bwd = h.attention_bf16_bwd_flops * threads * share;
      r.convert_s = h.bf16_convert_s / (threads * share);
      // The tiles run where the engine runs them: amx (the probe measured them, so the CPU
      // has it) in a 1-thread rank. Scaled as the peak, by the step factor too: they are
      // the linears' kernels that the factor was fitted against.
      if (h.tiles_fwd_flops_bf16 > 0 && h.tiles_bwd_flops_bf16 > 0 &&
          dense_bf16_team_on_tiles(true, threads)) {
        r.tiles_fwd = h.tiles_fwd_flops_bf16 * threads * share;
        r.tiles_bwd = h.tiles_bwd_flops_bf16 * threads * share;
        r.tiles_pack_s = h.tiles_pack_s_bf16 / (threads * share);
      }
      // The experts' packs are made wherever their grouped GEMM runs on AMX (its bf16 rates
      // were measured there), whatever the team; the MoE layer probe reuses one weight
      // version, so its rest does not hold them.
      if (h.tiles_pack_s_bf16 > 0 && h.grouped_fwd_flops_bf16 > 0)
        r.expert_pack_s = h.tiles_pack_s_bf16 / (threads * share);
    }
    set_moe_rates(r, h, precision == Precision::bf16, threads, share * (step > 0 ? step : 1.0));
  }
  return r;
}

double local_gemm_seconds(const ComputeRates& r, double M, double N, double K, double count) {
  if (M <= 0 || N <= 0 || K <= 0 || count <= 0) return 0;
  // Each short dimension costs its own share: few rows leave a packed weight panel used by
  // few rows, a short reduction (K, or a narrow N) leaves each output tile loaded and
  // stored for little work. Where the row figure is measured both apply at once, so that a
  // GEMM's rate does not jump where M passes min(N, K) (a bf16 256-row microbatch by a
  // 256-input weight was priced at 98% of the peak, one of 257 rows at 54%: every bf16
  // layout of 2-sequence microbatches read 19-29% fast in stop 39's closed loop).
  const double other = std::min(N, K);
  const double rows = gemm_rows_share(r.gemm_half_rows, r.gemm_few_rows, M);
  const double slowdown = r.gemm_half_rows > 0 ? 1 + rows / M + r.gemm_half_dim / other
                                               : 1 + r.gemm_half_dim / std::min(M, other);
  const double eff = r.hw->gemm_efficiency / slowdown;
  const double compute = count * 2 * M * N * K / (r.peak * eff);
  const double traffic = count * (M * K + K * N + M * N) * r.gemm_elem_bytes / r.memory_bw;
  return std::max(compute, traffic) + count * r.gemm_overhead_s;
}

double gemm_rows_share(double half, double few, double M) {
  if (few <= 0 || M >= kProbeFewRows) return half;
  if (M <= kProbeStepRows) return few;
  const double t = std::log2(kProbeFewRows / M) / std::log2(kProbeFewRows / kProbeStepRows);
  return half + (few - half) * t;
}

bool local_on_tiles(const ComputeRates& r, double out) {
  return r.tiles_fwd > 0 && r.tiles_bwd > 0 && dense_bf16_layer_on_tiles(out);
}

double local_tiles_seconds(const ComputeRates& r, double M, double out, double in,
                           bool input_grad) {
  if (M <= 0 || out <= 0 || in <= 0) return 0;
  return 2 * M * out * in / (input_grad ? r.tiles_bwd : r.tiles_fwd) + r.overhead_s;
}

GemmHalves gemm_halves_from_probes(double peak, double short_k_rate, double few_rows_rate) {
  // The formula at the two probe shapes, solved for its two unknowns:
  //   peak / short_k_rate  - 1 = rows / W + dim / S     (W x W x S)
  //   peak / few_rows_rate - 1 = rows / R + dim / W     (R x W x W)
  const double W = kProbeWideDim, S = kProbeShortK, R = kProbeFewRows;
  const double k = std::max(0.0, peak / short_k_rate - 1),
               m = std::max(0.0, peak / few_rows_rate - 1);
  const double det = 1 / (W * W) - 1 / (S * R);
  double rows = (k / W - m / S) / det, dim = (m / W - k / R) / det;
  // A negative share is the probes' noise: that dimension costs nothing, the other carries
  // its probe alone.
  if (rows < 0) rows = 0, dim = S * k;
  if (dim < 0) dim = 0, rows = R * m;
  return {dim, std::max(rows, kNoRowPenalty)};
}

double half_rate_dim(double d, double peak, double rate) {
  return std::max(0.0, d * (peak / rate - 1));
}

double local_convert_seconds(const ComputeRates& r, double elements, int calls) {
  if (elements <= 0) return 0;
  return elements * r.convert_s + calls * r.overhead_s;
}

MoeCosts local_moe_costs(const ComputeRates& R, const ComputeRates& R32,
                         const std::vector<double>& rows, double tokens, double E, double C,
                         double H, bool bf16, int chunk_rows, double up) {
  MoeCosts m;
  const double U = up > 0 ? up : H;
  // Router (fp32 under both precisions, moe_layer.h).
  m.forward = local_gemm_seconds(R32, tokens, E, C);
  m.backward = m.forward * R32.input_grad_ratio;
  m.weight = local_gemm_seconds(R32, E, C, tokens) * R32.weight_grad_ratio;
  // One expert's forward and input-gradient GEMMs over `r` rows in one call, and its
  // weight-gradient GEMMs.
  auto rows_gemms = [&](double r) {
    const double fwd = local_gemm_seconds(R, r, U, C) + local_gemm_seconds(R, r, C, H);
    m.forward += fwd;
    m.backward += fwd * R.input_grad_ratio;
  };
  auto weight_gemms = [&](double r) {
    m.weight +=
        (local_gemm_seconds(R, U, C, r) + local_gemm_seconds(R, C, H, r)) * R.weight_grad_ratio;
  };
  double total = 0;
  // The experts run as the engine runs them: the path model/expert_gemm.h takes is
  // kernels/grouped_gemm.cpp's (grouped_gemm_default_path: fp32 is oneDNN's sgemm once per
  // expert, the loop, measured ahead of the grouped kernel; bf16 the grouped AMX or
  // AVX512-BF16 kernel where the CPU has one). The loop is priced per expert below, as the
  // linears' GEMMs it is; a grouped kernel at its calibrated grouped rate.
  const bool grouped = grouped_gemm_path(bf16) != GroupedGemmPath::loop;
  if (grouped && R.grouped_fwd > 0 && R.grouped_bwd > 0 && R.grouped_wgt > 0) {
    // One grouped GEMM per matrix and pass over every local expert's rows, at its
    // calibrated rate (grouped_gemm_probe.cpp).
    for (const double r : rows) total += std::max(r, 0.0);
    const double flops = 2 * total * C * (U + H);
    m.forward += flops / R.grouped_fwd + total * H * R.moe_fwd_s;
    m.backward += flops / R.grouped_bwd + total * H * R.moe_bwd_s;
    m.weight += flops / R.grouped_wgt + total * H * R.moe_wgt_s;
    return m;
  }
  // The loop, or a profile without the grouped figures: one GEMM per expert on the linears'
  // path.
  const double q = MoeLayer::kRowQuantum;
  for (const double r : rows) {
    if (r <= 0) continue;
    total += r;
    if (!bf16) {
      rows_gemms(r), weight_gemms(r);
      continue;
    }
    // Bf16GeluExperts::for_row_chunks (model/expert_mlp_bf16.h): the largest chunks first,
    // then one under kRowQuantum rows, which the row GEMMs split as matmul_bf16 does and
    // weight_gemm pads to kRowQuantum.
    double left = r;
    for (double size = chunk_rows; size >= q; size /= 2)
      for (; left >= size; left -= size) rows_gemms(size), weight_gemms(size);
    if (left <= 0) continue;
    for (const int64_t piece : matmul_bf16_row_pieces(int64_t(std::ceil(left))))
      rows_gemms(double(piece));
    weight_gemms(q);
  }
  m.forward += total * H * R.moe_fwd_s;
  m.backward += total * H * R.moe_bwd_s;
  m.weight += total * H * R.moe_wgt_s;
  return m;
}

double expected_max_normal(int g) {
  if (g <= 1) return 0;
  // E[max] = integral of x g phi(x) Phi(x)^(g-1) dx, trapezoids over [-10, 10].
  const double step = 1e-3, pi = 3.14159265358979323846;
  double sum = 0;
  for (double x = -10; x <= 10; x += step) {
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * pi);
    const double Phi = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += x * g * phi * std::pow(Phi, g - 1) * step;
  }
  return sum;
}

namespace {

// Wave quantisation (NVIDIA, Matrix Multiplication Background guide, 3.2): the output is cut
// into 256x128 tiles (either orientation), one per SM at a time; a last, partial wave leaves
// SMs idle. The share of the sms' tile slots used, in the better orientation.
double wave_efficiency(double sms, double M, double N, double count) {
  double best = 0;
  for (auto [tm, tn] : {std::pair{256.0, 128.0}, {128.0, 256.0}}) {
    const double tiles = std::ceil(M / tm) * std::ceil(N / tn) * count;
    best = std::max(best, tiles / (std::ceil(tiles / sms) * sms));
  }
  return best;
}

}  // namespace

double held_sms_loss(double sms, double held, double M, double N, double count) {
  if (sms <= 0 || held <= 0 || M <= 0 || N <= 0 || count <= 0) return 0;
  if (held >= sms) return 1;
  // The rate is the SMs times the share of their slots used (gemm_seconds' peak x waves).
  const double left = sms - held;
  const double rate = left * wave_efficiency(left, M, N, count);
  return std::max(0.0, 1 - rate / (sms * wave_efficiency(sms, M, N, count)));
}

double gemm_seconds(const ComputeRates& r, double M, double N, double K, double elem_bytes,
                    double count) {
  if (M <= 0 || N <= 0 || K <= 0 || count <= 0) return 0;
  const HardwareProfile& h = *r.hw;
  const double d = std::min({M, N, K});
  double eff = h.gemm_efficiency * d / (d + h.gemm_half_dim);
  if (h.sms > 0) eff *= wave_efficiency(h.sms, M, N, count);
  const double compute = count * 2 * M * N * K / (r.peak * eff);
  const double traffic = count * (M * K + K * N + M * N) * elem_bytes / r.memory_bw;
  return std::max(compute, traffic) + r.overhead_s;
}

double stream_seconds(const ComputeRates& r, double bytes, int kernels) {
  return bytes / r.memory_bw + kernels * r.overhead_s;
}

double pointwise_seconds(const ComputeRates& r, double elements, double bytes, int kernels) {
  return std::max(bytes / r.memory_bw, elements * r.pointwise_s) + kernels * r.overhead_s;
}

GroupSpan group_span(const HardwareProfile& h, int size, int stride) {
  GroupSpan g;
  g.size = size;
  if (h.local || size <= 1) {
    g.per_node = size;
    return g;
  }
  const int per_node_ranks = h.devices_per_node;
  // Members stride apart: a node of devices_per_node consecutive ranks holds
  // devices_per_node / stride of them (at least one).
  g.per_node = std::clamp(per_node_ranks / std::max(stride, 1), 1, size);
  g.nodes = int((int64_t(size) + g.per_node - 1) / g.per_node);
  return g;
}

double collective_seconds(const HardwareProfile& h, Collective op, double bytes,
                          const GroupSpan& g) {
  const int n = g.size;
  if (n <= 1 || bytes <= 0) return 0;
  const double factor = op == Collective::all_reduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
  double busbw = h.intra_busbw, latency = h.intra_latency_s;
  if (g.nodes > 1) {
    busbw = std::min(h.intra_busbw, g.per_node * h.inter_busbw);
    latency = h.inter_latency_s;
  }
  // NCCL runs all-gather and reduce-scatter as a ring only: n - 1 steps, nodes - 1 of them
  // across nodes (its own tuning model, src/graph/tuning.cc, charges each step's latency the
  // same way). All-reduce (a tree at scale) and all-to-all keep 2 log2 n latency-bound steps.
  // Locally the calibrated latency already is the collective's.
  if (!h.local && (op == Collective::all_gather || op == Collective::reduce_scatter))
    return h.intra_latency_s * (n - g.nodes) + h.inter_latency_s * (g.nodes - 1) +
           bytes * factor / busbw;
  const double steps = 2 * std::ceil(std::log2(double(n)));
  return latency * steps + bytes * factor / busbw;
}

double p2p_seconds(const HardwareProfile& h, double bytes, bool across_nodes) {
  if (across_nodes) return h.inter_latency_s + bytes / h.p2p_bw_inter;
  return h.intra_latency_s + bytes / h.p2p_bw_intra;
}

}  // namespace mt::plan
