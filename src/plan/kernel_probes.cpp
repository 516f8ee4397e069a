// The kernel probes of --calibrate (calibration_probes.h): the engine's GEMM paths, its
// attention kernel, pointwise passes, memory streaming and MoE layer, one thread, timed as
// calibration_timing.h does.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/gelu.h"
#include "kernels/gemm_peak.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "model/moe_layer.h"
#include "plan/calibration_probes.h"
#include "plan/calibration_timing.h"
#include "plan/hardware_costs.h"

namespace mt::plan {

namespace {

double gemm_rate(int M, int N, int K, double seconds) {
  std::vector<float> a(size_t(M) * K, 0.5f), b(size_t(K) * N, 0.25f), c(size_t(M) * N, 0);
  const double t = best_time(seconds, [&] {
    sgemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
  });
  return 2.0 * M * N * K / t;
}

// matmul_bf16_forward of an (M, K) input by an (N, K) weight: the linear layers' bf16 GEMM.
double bf16_gemm_rate(int M, int N, int K, double seconds) {
  std::vector<bf16> a(size_t(M) * K, float_to_bf16(0.5f)), b(size_t(N) * K, float_to_bf16(0.25f));
  std::vector<float> c(size_t(M) * N, 0);
  const double t = best_time(
      seconds, [&] { matmul_bf16_forward(c.data(), a.data(), b.data(), nullptr, M, K, N); });
  return 2.0 * M * N * K / t;
}

// One path's two penalty probes (hardware_costs.h's shapes), each with half the time.
GemmHalves gemm_halves_of(double (*rate)(int, int, int, double), double peak, double seconds) {
  const int W = int(kProbeWideDim), S = int(kProbeShortK), R = int(kProbeFewRows);
  const double short_k = rate(W, W, S, seconds / 2), few_rows = rate(R, W, W, seconds / 2);
  return gemm_halves_from_probes(peak, short_k, few_rows);
}

// The linear layer's backward GEMMs against the forward the model assumes for the same
// shape (2 N C OC FLOPs at the calibrated peak `peak`): {input-gradient time, weight-gradient
// time} over it. The weight gradient reads its first operand transposed and accumulates
// (docs/precision.md: 72-86% of the bf16 peak where the forward reaches ~90%). Against the
// peak rather than a measured forward of the shape: an isolated fp32 forward of some shapes
// runs far below its rate inside the model (sgemm's transposed-B path), which would
// distort the ratio.
std::pair<double, double> backward_ratios_of(bool bf16_path, double peak, double seconds, int N,
                                             int C, int OC) {
  std::vector<float> x(size_t(N) * C, 0.1f), w(size_t(OC) * C, 0.1f), y(size_t(N) * OC, 0.1f);
  std::vector<float> dx(x.size()), dw(w.size());
  std::vector<bf16> x16(x.size(), 0x3DCD), w16(w.size(), 0x3DCD), y16(y.size(), 0x3DCD);
  const double s = seconds / 2, fwd = 2.0 * N * C * OC / peak;
  double in, wt;
  if (bf16_path) {
    in = best_time(
        s, [&] { matmul_bf16_backward_input(dx.data(), y16.data(), w16.data(), N, C, OC, false); });
    wt = best_time(s, [&] {
      matmul_bf16_backward_weight(dw.data(), nullptr, y16.data(), x16.data(), N, C, OC);
    });
  } else {
    in = best_time(s, [&] { matmul_backward_input(dx.data(), y.data(), w.data(), N, C, OC); });
    wt = best_time(
        s, [&] { matmul_backward_weight(dw.data(), nullptr, y.data(), x.data(), N, C, OC); });
  }
  return {in / fwd, wt / fwd};
}

// The mean over the block's two kinds of linear: widening (1024 x 512 -> 1024, as qkv and
// fc) and narrowing (1024 x 1024 -> 256, as the projections), whose backward passes differ.
std::pair<double, double> backward_ratios(bool bf16_path, double peak, double seconds) {
  const auto [in1, w1] = backward_ratios_of(bf16_path, peak, seconds / 2, 1024, 512, 1024);
  const auto [in2, w2] = backward_ratios_of(bf16_path, peak, seconds / 2, 1024, 1024, 256);
  return {(in1 + in2) / 2, (w1 + w2) / 2};
}

// A block of a small run (8 sequences of 128, 8 heads of 32): its 4 MiB of probabilities
// (where the kernel keeps them) spill out of L2 as a real microbatch's do; a smaller shape
// flatters the backward.
constexpr int kAttentionC = 256, kAttentionHeads = 8;

// Whether the probe's attention kernel of the precision keeps row statistics rather than
// the probabilities (attention_row_stats[_bf16]).
bool attention_keeps_row_stats(bool bf16) {
  return attention_saved_form(bf16, kAttentionC, kAttentionHeads) != AttentionSaved::probabilities;
}

// The attention core a run of `precision` computes, forward and backward FLOP/s of one
// thread (4 B T^2 C forward, twice that backward). The engine's attention is the same fp32
// kernel under both precisions (docs/precision.md: bf16 rounds only the linears' GEMM
// inputs), so both call attention_forward/backward; when the engine gains a bf16 attention
// entry point, "bf16" calls it here and nothing else changes.
std::pair<double, double> attention_rates(Precision precision, double seconds) {
  const int B = 8, T = 128, C = kAttentionC, NH = kAttentionHeads;
  const bool bf16_run = precision == Precision::bf16;
  // What the block keeps between the passes: the probabilities, or the row statistics the
  // register-tile kernels recompute them from (kernels/attention.h).
  const AttentionSaved saved = attention_saved_form(bf16_run, C, NH);
  std::vector<float> qkv(size_t(B) * T * 3 * C, 0.01f), out(size_t(B) * T * C);
  std::vector<float> att(attention_saved_floats(saved, B, T, C, NH)), dout(out.size(), 0.01f),
      dqkv(qkv.size());
  // The bf16 block's own calls: bf16 products, results rounded into its bf16 slot buffers.
  std::vector<bf16> out16(out.size()), dqkv16(dqkv.size());
  std::vector<float> scratch(attention_backward_scratch_floats(B, T, C, NH, bf16_run));
  const double flops = 4.0 * B * T * T * C;
  // Cold caches: in a step the probabilities written by the forward are read back by the
  // backward only after the rest of the model has run.
  const double fwd =
      flops / best_time_cold(0.5 * seconds, [&] {
        if (bf16_run)
          attention_forward_bf16_out16(out16.data(), out.data(), att.data(), qkv.data(), B, T, C,
                                       NH, AmxTiles::allow, saved);
        else
          attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, saved);
      });
  const double bwd = 2 * flops / best_time_cold(0.5 * seconds, [&] {
                       if (bf16_run)
                         attention_backward_bf16_out16(dqkv16.data(), dqkv.data(), scratch.data(),
                                                       dout.data(), qkv.data(), att.data(), B, T, C,
                                                       NH, AmxTiles::allow, saved);
                       else
                         attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                                            att.data(), B, T, C, NH, saved);
                     });
  return {fwd, bwd};
}

// How much a core slows when every core computes: `n` threads each running 512^3 sgemms for
// the same window, their total rate over n x one thread's rate alone (1: independent cores;
// less where vCPUs share a physical core, its caches or its memory bandwidth, as the ranks
// of a dp 2 run do).
double parallel_efficiency(int n, double seconds) {
  if (n <= 1) return 1;
  auto run = [&](int threads) {
    std::vector<double> flops(size_t(threads), 0);
    std::vector<std::thread> pool;
    const double t_end = now_seconds() + seconds / 6;
    const double t0 = now_seconds();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        omp_set_num_threads(1);
        const int m = 512;
        std::vector<float> a(size_t(m) * m, 0.5f), b(a.size(), 0.25f), c(a.size(), 0);
        do {
          sgemm(false, false, m, m, m, 1.0f, a.data(), m, b.data(), m, 0.0f, c.data(), m);
          flops[size_t(t)] += 2.0 * m * m * m;
        } while (now_seconds() < t_end);
      });
    for (auto& th : pool) th.join();
    double total = 0;
    for (double f : flops) total += f;
    return total / (now_seconds() - t0);
  };
  // The best of three windows each, as best_time keeps the least disturbed run.
  double one = 0, all = 0;
  for (int i = 0; i < 3; ++i) one = std::max(one, run(1)), all = std::max(all, run(n));
  return std::clamp(all / (n * one), 0.05, 1.0);
}

// The engine's MoE layer (model/moe_layer.cpp) at the reference step's shape as an MoE
// block (N 1024 tokens, C 256, 4 experts, top-2, one rank, one thread), timed per pass
// (forward, backward_input, backward_weight; the best run of each), less what
// local_moe_costs gives its router and expert GEMMs for the rows each expert received
// (same calls, same bf16 chunks): what is left per expert hidden element (rows x 4C) is
// {moe_fwd_s, moe_bwd_s, moe_wgt_s} of `h`'s GEMM figures (measured before this).
// Weights are drawn as the engine initialises them (normal, std 0.02) and the input as
// LayerNorm leaves it (unit variance), so the router spreads rows nearly evenly.
std::array<double, 3> moe_layer_costs(const HardwareProfile& h, bool bf16, double seconds) {
  ModelConfig cfg;
  cfg.layers = 4, cfg.dim = 256, cfg.heads = 8, cfg.seq = 128, cfg.vocab = 256;
  cfg.experts = 4, cfg.topk = 2;
  const int N = 8 * cfg.seq, C = cfg.dim, H = cfg.hidden();
  uint64_t version = 1;
  ExpertParallelShard ep;
  if (bf16) ep.bf16_version = &version;
  ParamTable table;
  SlotLayout layout;
  MoeLayer layer(0, cfg, ep, N, table, layout);
  std::vector<float> params(table.total()), grads(table.total(), 0), slot(layout.total());
  std::vector<float> stage(std::max<size_t>(layer.bf16_stage_floats(), 1));
  for (size_t i = 0; i < params.size(); ++i) params[i] = float(0.02 * normal01(11, 1, i));
  layer.bind(params.data(), grads.data());
  if (bf16) layer.set_bf16_stage(stage.data());
  std::vector<float> x(size_t(N) * C), y(x.size()), dy(x.size()), dx(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(normal01(11, 2, i)), dy[i] = float(1e-3 * normal01(11, 3, i));
  // The rows each expert gets (the same input routes the same way every call).
  layer.reset_stats();
  layer.forward(slot.data(), x.data(), y.data(), N);
  std::vector<double> rows;
  for (const int64_t r : layer.stats().load) rows.push_back(double(r));
  const double s = seconds / 3;
  const double fwd = best_time_cold(s, [&] { layer.forward(slot.data(), x.data(), y.data(), N); });
  const double bwd = best_time_cold(
      s, [&] { layer.backward_input(slot.data(), x.data(), dy.data(), dx.data(), N); });
  const double wgt = best_time_cold(s, [&] { layer.backward_weight(slot.data(), x.data(), N); });
  HardwareProfile g = h;
  g.step_factor_fp32 = g.step_factor_bf16 = 0;
  g.moe_fwd_s = g.moe_bwd_s = g.moe_wgt_s = 0;
  g.moe_fwd_s_bf16 = g.moe_bwd_s_bf16 = g.moe_wgt_s_bf16 = 0;
  const ComputeRates R = compute_rates(g, bf16 ? Precision::bf16 : Precision::fp32, 1, 1);
  const ComputeRates R32 = compute_rates(g, Precision::fp32, 1, 1);
  const MoeCosts gemms =
      local_moe_costs(R, R32, rows, N, cfg.experts, C, H, bf16, MoeLayer::bf16_chunk_rows(N));
  const double elems = double(N) * cfg.topk * H;
  // A small floor keeps the figure "measured" (0 means absent) where the GEMM formula
  // already exceeds the layer.
  auto per = [&](double t, double model) { return std::max(t - model, 1e-3 * t) / elems; };
  return {per(fwd, gemms.forward), per(bwd, gemms.backward), per(wgt, gemms.weight)};
}

}  // namespace

// GEMM: the best square sgemm of one thread is the peak (efficiency 1 by definition).
void measure_sgemm_peak(HardwareProfile& h, const ProbeRun& run) {
  h.peak_fp32 = measure_sgemm_peak_gflops(1, run.seconds) * 1e9;
  h.gemm_efficiency = 1;
}

void measure_parallel_efficiency(HardwareProfile& h, const ProbeRun& run) {
  h.parallel_efficiency = parallel_efficiency(h.cores, run.seconds);
}

// The GEMM formula's two penalties of the path (hardware_costs.h): a short reduction (a W x
// W x 64 GEMM) and few rows (128, one 128-token sequence, by a W x W weight), solved
// together, so that each probe's shape is priced at its measured rate.
// Then the share of fewer rows still, as the step's own linears pay it (few_rows_probe.cpp).
void measure_gemm_halves(HardwareProfile& h, const ProbeRun& run) {
  const GemmHalves g = gemm_halves_of(gemm_rate, h.peak_fp32, run.seconds / 2);
  h.gemm_half_dim = g.dim, h.gemm_half_rows = g.rows;
  h.gemm_few_rows = measure_few_rows(h, false, run.seconds / 2);
}

void measure_backward_ratios(HardwareProfile& h, const ProbeRun& run) {
  std::tie(h.gemm_input_grad_ratio, h.gemm_weight_grad_ratio) =
      backward_ratios(false, h.peak_fp32, run.seconds);
}

// Per-call overhead: a 16^3 GEMM is all overhead.
void measure_kernel_overhead(HardwareProfile& h, const ProbeRun& run) {
  std::vector<float> a(256, 1), b(256, 1), c(256, 0);
  h.kernel_overhead_s = best_time(run.seconds,
                                  [&] {
                                    for (int i = 0; i < 100; ++i)
                                      sgemm(false, false, 16, 16, 16, 1.0f, a.data(), 16, b.data(),
                                            16, 0.0f, c.data(), 16);
                                  }) /
                        100;
}

// Memory-bound: y += x over 32 MiB arrays, 12 bytes moved per element.
void measure_memory_bw(HardwareProfile& h, const ProbeRun& run) {
  const size_t n = size_t(8) << 20;
  std::vector<float> x(n, 1.0f), y(n, 2.0f);
  const double t = best_time(run.seconds, [&] {
    for (size_t i = 0; i < n; ++i) y[i] += x[i];
  });
  h.memory_bw = 12.0 * double(n) / t;
}

void measure_attention(HardwareProfile& h, const ProbeRun& run) {
  std::tie(h.attention_fwd_flops, h.attention_bwd_flops) =
      attention_rates(Precision::fp32, run.seconds);
  h.attention_row_stats = attention_keeps_row_stats(false);
  // The kernels the attention core picks from at every head dim and precision: what a local
  // plan's memory counts for this CPU (model/kernel_target.h).
  h.attention_kernels = attention_isa().bits();
}

// The slower of GELU and LayerNorm forward over 1 Mi elements, per element.
void measure_pointwise(HardwareProfile& h, const ProbeRun& run) {
  const int N = 2048, D = 512;
  std::vector<float> x(size_t(N) * D, 0.3f), y(x.size()), mean(N), rstd(N), w(D, 1), bias(D);
  const double gelu =
      best_time(run.seconds / 2, [&] { gelu_forward(y.data(), x.data(), x.size()); });
  const double ln = best_time(run.seconds / 2, [&] {
    layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, D);
  });
  h.pointwise_s = std::max(gelu, ln) / double(x.size());
}

void measure_bf16_peak(HardwareProfile& h, const ProbeRun& run) {
  h.peak_bf16 = measure_bf16_gemm_peak_gflops(1, run.seconds) * 1e9;
}

void measure_bf16_halves(HardwareProfile& h, const ProbeRun& run) {
  const GemmHalves g = gemm_halves_of(bf16_gemm_rate, h.peak_bf16, run.seconds / 2);
  h.gemm_half_dim_bf16 = g.dim, h.gemm_half_rows_bf16 = g.rows;
  h.gemm_few_rows_bf16 = measure_few_rows(h, true, run.seconds / 2);
}

void measure_bf16_backward_ratios(HardwareProfile& h, const ProbeRun& run) {
  std::tie(h.gemm_input_grad_ratio_bf16, h.gemm_weight_grad_ratio_bf16) =
      backward_ratios(true, h.peak_bf16, run.seconds);
}

// The dense AMX tile kernel that 1-thread ranks run for their bf16 linears
// (kernels/dense_gemm_bf16.h), at the block's two kinds of linear on 1024 rows (as
// backward_ratios: 512 -> 1024 and 1024 -> 256): forward and input-gradient FLOP/s over
// both, each call on the packs made once (the first call packs: best_time keeps the others),
// and the seconds per weight element of packing both layouts after a change of the weights.
void measure_bf16_tiles(HardwareProfile& h, const ProbeRun& run) {
  ScopedDenseBf16Path amx(DenseBf16Path::amx);
  const int N = 1024;
  const double s = run.seconds / 6;
  double fwd = 0, bwd = 0, pack = 0, flops = 0, elements = 0;
  for (const auto& [C, OC] : {std::pair{512, 1024}, std::pair{1024, 256}}) {
    uint64_t version = 1;
    DenseBf16Weight w(C, OC, &version);
    std::vector<float> w32(size_t(OC) * C, 0.02f), out(size_t(N) * OC), dinp(size_t(N) * C);
    std::vector<float> bias(size_t(OC), 0.01f);
    std::vector<bf16> x(size_t(N) * C, 0x3DCD), dy(size_t(N) * OC, 0x3DCD);
    fwd += best_time(
        s, [&] { dense_bf16_forward(out.data(), x.data(), w, w32.data(), bias.data(), N); });
    bwd += best_time(
        s, [&] { dense_bf16_backward_input(dinp.data(), dy.data(), w, w32.data(), N, false); });
    pack += best_time(s, [&] {
      ++version;
      w.packed(w32.data(), GroupedPack::forward);
    });
    flops += 2.0 * N * C * OC, elements += double(C) * OC;
  }
  h.tiles_fwd_flops_bf16 = flops / fwd;
  h.tiles_bwd_flops_bf16 = flops / bwd;
  h.tiles_pack_s_bf16 = pack / elements;
}

void measure_bf16_overhead(HardwareProfile& h, const ProbeRun& run) {
  std::vector<bf16> a(256, 0x3F80), b(256, 0x3F80);
  std::vector<float> c(256, 0);
  h.bf16_overhead_s =
      best_time(run.seconds,
                [&] {
                  for (int i = 0; i < 100; ++i)
                    matmul_bf16_forward(c.data(), a.data(), b.data(), nullptr, 16, 16, 16);
                }) /
      100;
}

// Rounding 2 Mi floats (a block's activations or a weight matrix, mostly out of the L2).
void measure_bf16_convert(HardwareProfile& h, const ProbeRun& run) {
  const size_t n = size_t(2) << 20;
  std::vector<float> x(n, 0.3f);
  std::vector<bf16> y(n);
  h.bf16_convert_s = best_time(run.seconds, [&] { to_bf16(y.data(), x.data(), n); }) / double(n);
}

void measure_bf16_attention(HardwareProfile& h, const ProbeRun& run) {
  std::tie(h.attention_bf16_fwd_flops, h.attention_bf16_bwd_flops) =
      attention_rates(Precision::bf16, run.seconds);
  h.attention_row_stats_bf16 = attention_keeps_row_stats(true);
}

void measure_moe_layer(HardwareProfile& h, const ProbeRun& run) {
  const std::array<double, 3> m = moe_layer_costs(h, false, run.seconds);
  h.moe_fwd_s = m[0], h.moe_bwd_s = m[1], h.moe_wgt_s = m[2];
}

void measure_moe_layer_bf16(HardwareProfile& h, const ProbeRun& run) {
  const std::array<double, 3> m = moe_layer_costs(h, true, run.seconds);
  h.moe_fwd_s_bf16 = m[0], h.moe_bwd_s_bf16 = m[1], h.moe_wgt_s_bf16 = m[2];
}

}  // namespace mt::plan
