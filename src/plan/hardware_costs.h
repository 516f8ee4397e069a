// The cost formulas the time model composes, each one line over a HardwareProfile
// (NCCL's tuning.cc style: a table of constants, one formula):
//   GEMM (M x N x K):  max(2MNK / (peak * eff * d/(d + d_half)), bytes / memory_bw) + overhead,
//                      d = min(M, N, K) (roofline with a small-tile penalty)
//   memory-bound op:   bytes / memory_bw + overhead
//   collective:        latency * steps + bytes * factor / busbw, factor = nccl-tests' busbw
//                      factor (all-reduce 2(n-1)/n, all-gather / reduce-scatter / all-to-all
//                      (n-1)/n); busbw within one node, or min(node busbw, members per node x
//                      per-NIC busbw) across nodes; steps = 2 log2 n (tree/ring latency term)
//   point-to-point:    latency + bytes / p2p bandwidth (NVLink or one NIC)
// Groups are placed as the mesh places them (docs/contracts.md §7: tp fastest, then dp, then
// pp), devices_per_node consecutive ranks per node.
#pragma once

#include "plan/hardware_profile.h"

namespace mt::plan {

struct ComputeRates {
  const HardwareProfile* hw = nullptr;
  double peak = 0;        // GEMM peak per rank, FLOP/s
  double memory_bw = 0;   // per rank, bytes/s
  double overhead_s = 0;  // per kernel
  // Local: per-rank attention rates and seconds per pointwise element (0: not measured).
  double attention_fwd = 0, attention_bwd = 0, pointwise_s = 0;
  // Local: the GEMM path of the precision (sgemm, or oneDNN's bf16 matmul): its
  // small-dimension penalty, per-call overhead and operand bytes; seconds per element of
  // fp32 -> bf16 rounding (bf16 only).
  double gemm_half_dim = 0, gemm_overhead_s = 0, gemm_elem_bytes = 4, convert_s = 0;
  // Local: the path's penalty where the rows (M) are the smallest dimension (0: not
  // measured, gemm_half_dim applies).
  double gemm_half_rows = 0;
  // Local: the path's row share at kProbeStepRows rows and below (0: not measured,
  // gemm_half_rows applies at every M; gemm_rows_share).
  double gemm_few_rows = 0;
  // The linear layer's input-/weight-gradient GEMM time over its forward's (local,
  // calibrated per precision; 1 elsewhere).
  double input_grad_ratio = 1, weight_grad_ratio = 1;
  // Local: the MoE layer's work beyond its GEMMs, seconds per expert hidden element
  // (rows x 4C) per rank, forward / backward_input / backward_weight (0: not calibrated).
  double moe_fwd_s = 0, moe_bwd_s = 0, moe_wgt_s = 0;
  // Local: the grouped expert GEMMs' FLOP/s per rank, forward / input / weight gradient
  // (0: not calibrated; the experts are then priced one GEMM each on the linears' path).
  double grouped_fwd = 0, grouped_bwd = 0, grouped_wgt = 0;
  // Local: seconds per microbatch and linear weight element a real step pays beyond its
  // kernels (calibrated in a step, so not scaled by the step factor; 0: not calibrated).
  double microbatch_weight_s = 0;
  // Local bf16 where the rank runs the dense AMX tiles (the engine's rule,
  // dense_bf16_team_on_tiles; 0 elsewhere, and in profiles without the tile probe): their
  // forward and input-gradient FLOP/s for the layers of up to kDenseBf16TilesMaxOut outputs,
  // and the seconds per weight element of packing both layouts once per step.
  double tiles_fwd = 0, tiles_bwd = 0, tiles_pack_s = 0;
  // Local bf16 with the grouped AMX expert GEMMs calibrated: the seconds per expert weight
  // element of rounding and packing both layouts once per step (kernels/grouped_gemm_prepack,
  // the same grouped_bf16_pack as the dense tiles', in any team; 0: rounded only).
  double expert_pack_s = 0;
};

// Per-rank rates for a precision; local ranks share the machine's cores and memory
// bandwidth (ranks x threads over the calibrated cores slows every rank down).
ComputeRates compute_rates(const HardwareProfile& h, Precision precision, int ranks, int threads);

// `count` independent GEMMs of the same shape (a batched GEMM: one overhead).
double gemm_seconds(const ComputeRates& r, double M, double N, double K, double elem_bytes,
                    double count = 1);
double stream_seconds(const ComputeRates& r, double bytes, int kernels = 1);
// The share of its seconds a GEMM with an (M, N) output (`count` of them) loses while `held`
// of the device's `sms` run other kernels (an overlapped collective's): gemm_seconds' wave
// model with sms - held SMs. It runs in waves of one output tile per SM, ceil(tiles / sms)
// of them on the whole device and ceil(tiles / (sms - held)) beside the collective, so over
// the seconds it shares the device it progresses at the ratio of the two (1 - that ratio
// lost). Large GEMMs lose held / sms; one whose tiles fit in one reduced wave nothing; one
// just past it half. 0 without sms or held.
double held_sms_loss(double sms, double held, double M, double N, double count = 1);
// Local hardware: `count` GEMMs on the precision's GEMM path at the peak over 1 +
// gemm_half_rows / M + gemm_half_dim / min(N, K) (with that path's calibrated figures and
// overhead; without a row figure, 1 + gemm_half_dim / min(M, N, K)). M is the rows (tokens),
// N the output features, K the reduction.
double local_gemm_seconds(const ComputeRates& r, double M, double N, double K, double count = 1);
// The calibration's two penalty probes (kernel_probes.cpp): a W x W x S GEMM (a short
// reduction) and an R x W x W one (few rows).
constexpr double kProbeWideDim = 1024, kProbeShortK = 64, kProbeFewRows = 128;
// The row figure stored for "no penalty" (0 reads as "not measured").
constexpr double kNoRowPenalty = 1e-3;
// The step-rows probe (few_rows_probe.cpp): the engine's linears at 32 rows (one 128-token
// sequence over cp 4, a 32-token microbatch) against 1024 (the backward ratios' rows).
constexpr double kProbeStepRows = 32, kProbeStepRowsRef = 1024;
// The row share a GEMM of M rows pays (local_gemm_seconds): each figure where it was
// measured, `half` (gemm_half_rows) at kProbeFewRows rows and above, `few` (gemm_few_rows)
// at kProbeStepRows and below, linear in log2 M between; `half` alone without `few`.
double gemm_rows_share(double half, double few, double M);
struct GemmHalves {
  double dim = 0, rows = 0;
};
// {gemm_half_dim, gemm_half_rows} for which local_gemm_seconds prices both probe shapes at
// their measured rates (each at least 0; rows at least kNoRowPenalty).
GemmHalves gemm_halves_from_probes(double peak, double short_k_rate, double few_rows_rate);
// The half-rate dimension for which a GEMM whose smallest dimension is `d` runs at `rate`
// against `peak` (the formula's d / (d + half) solved for half; at least 0).
double half_rate_dim(double d, double peak, double rate);
// Local bf16: whether a linear layer of `out` outputs runs on the dense AMX tiles (the
// rank's rates say the rank runs them; the layer's width as the engine decides it,
// dense_bf16_layer_on_tiles), and its forward or input-gradient GEMM there: M rows, `out`
// outputs, `in` inputs at the tiles' calibrated rate (a row depends only on itself and the
// packed weight, so no row or short-dimension share), plus one kernel's overhead.
bool local_on_tiles(const ComputeRates& r, double out);
double local_tiles_seconds(const ComputeRates& r, double M, double out, double in, bool input_grad);
// Local bf16: rounding `elements` fp32 values to bf16 in `calls` to_bf16 calls.
double local_convert_seconds(const ComputeRates& r, double elements, int calls = 1);
// A pointwise pass over `elements` moving `bytes`: the slower of streaming and, where
// calibrated, the per-element compute (tanh, exp, normalisation).
double pointwise_seconds(const ComputeRates& r, double elements, double bytes, int kernels = 1);

// Local: one MoE layer's work for one microbatch as model/moe_layer.cpp does it, per pass.
struct MoeCosts {
  double forward = 0, backward = 0, weight = 0;
};
// `tokens` tokens routed by an (E, C) router; rows[e] the rows each local expert receives
// (rows x (C -> H -> C) GELU MLPs). R: the experts' GEMM path (bf16: oneDNN over row chunks
// of MoeLayer::kRowQuantum * 2^j rows, at most `chunk_rows`, and a last partial chunk, which
// the row GEMMs split into matmul_bf16_row_pieces and the weight GEMMs pad to kRowQuantum);
// R32: the router's (always fp32). Router: forward (tokens, E, C), its input gradient of
// the same shape, weight gradient (E, C, tokens); experts: fc (rows, H, C) and proj (rows,
// C, H), input gradients of the same shapes, weight gradients (H, C, rows) and (C, H,
// rows); backward GEMMs times the path's calibrated ratios; plus R's moe_*_s per hidden
// element. Fractional rows (expected loads) run as their whole chunks and one partial chunk
// of the rows left, rounded up.
// Where the precision's grouped path (kernels/grouped_gemm.h, grouped_gemm_path) is a grouped
// kernel and the profile has its grouped rates, the experts' GEMMs are instead their FLOPs
// at those rates; where it is the loop (fp32's default), the per-expert formula above.
// up: the first GEMM's width, H for GELU experts, 2H for SwiGLU ones (gate and up in one
// weight, model/expert_mlp_fp32.h); 0 means H.
MoeCosts local_moe_costs(const ComputeRates& R, const ComputeRates& R32,
                         const std::vector<double>& rows, double tokens, double E, double C,
                         double H, bool bf16, int chunk_rows, double up = 0);
// Expected maximum of g independent standard normal variables (0 for g <= 1), by
// quadrature: the busiest of g ranks' loads.
double expected_max_normal(int g);

enum class Collective { all_reduce, all_gather, reduce_scatter, all_to_all };

// Where a group's members sit: size, members per node, nodes.
struct GroupSpan {
  int size = 1, per_node = 1, nodes = 1;
};
// stride: rank distance between consecutive members (tp 1, dp tp, ep tp).
GroupSpan group_span(const HardwareProfile& h, int size, int stride);

// bytes: the per-rank buffer (all_gather: the gathered result) as nccl-tests count it.
double collective_seconds(const HardwareProfile& h, Collective op, double bytes,
                          const GroupSpan& g);
double p2p_seconds(const HardwareProfile& h, double bytes, bool across_nodes);

}  // namespace mt::plan
