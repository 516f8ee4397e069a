// The cost of one microbatch in a block and at a stage's edges, from the two cost models
// behind one interface, chosen once per candidate:
//   local_costs.cpp  meshtrain's own CPU engine as calibrated here: its attention kernel,
//                    the calibrated MoE layer, the collectives its tp linears issue, its
//                    bf16 roundings, the per-microbatch cost a real step adds;
//   gpu_costs.cpp    the GPU software a preset plans for (software_profiles.h): dropout,
//                    bias-gradient passes, Megatron's tp communication and its overlap, the
//                    fp32 cross-entropy, the gradient-accumulation pass.
// The terms both share (the GEMMs of the projections and MLP, the attention core as batched
// GEMMs, LayerNorms and residuals, MoE as streamed permutations) live in cost_model.cpp.
// Each term returns the forward (F), input-gradient (B) and weight-gradient (W) seconds of
// one microbatch on one rank; shapes: b sequences of s tokens, width h, a heads, tp t,
// N = b s rows (Nl = N / t on the rank under sequence parallelism), e bytes per activation;
// the block's widths (model_flops.h: query q, key/value kv, MLP F, gated for SwiGLU) make the
// same terms the GPT block's (q = kv = h, F = 4h) or the Llama block's (GQA, SwiGLU).
#pragma once

#include <vector>

#include "plan/hardware_costs.h"
#include "plan/layout.h"
#include "plan/model_flops.h"

namespace mt::plan {

struct Passes {
  double forward = 0, backward = 0, weight = 0;
  Passes& operator+=(const Passes& o) {
    forward += o.forward, backward += o.backward, weight += o.weight;
    return *this;
  }
};

// One block's costs for one microbatch: the passes (communication and recomputation
// included) and, of them, the exposed tp / ep communication and the repeated forward work.
struct BlockCosts {
  Passes passes;
  double tp_comm = 0, ep_comm = 0, cp_comm = 0, recompute = 0;
};

struct CostContext;

// What differs between the two cost models.
struct CostModel {
  // `cover`: the W of the unit above the layer in its chunk, which the engine may run under
  // an overlapped MoE layer's first backward dispatch (stage_costs.cpp; local only).
  BlockCosts (*block)(const CostContext& c, int layer, double cover);
  // The embedding's tensor-parallel communication (adds its exposed time to *tp).
  Passes (*embedding_comm)(const CostContext& c, double* tp);
  // ln_f, the logits, the cross-entropy and its communication (adds exposed tp time to *tp).
  Passes (*head)(const CostContext& c, double* tp);
  // After each block's weight gradient: work on its `params` parameters (GPU: Megatron's
  // gradient-accumulation pass).
  Passes (*after_block)(const CostContext& c, double params);
  // Once per stage and microbatch, over the stage's `linear_weights` (local: what a real step
  // pays beyond its kernels).
  Passes (*per_stage)(const CostContext& c, double linear_weights);
};
const CostModel& local_cost_model();
const CostModel& gpu_cost_model();

// What every term of a candidate reads.
struct CostContext {
  CostContext(const PlanRequest& request, const Layout& layout) : r(request), l(layout) {}
  const PlanRequest& r;
  const Layout& l;
  const CostModel* model = nullptr;
  ComputeRates rates;        // the precision's
  ComputeRates rates32;      // local: fp32 (the MoE router stays fp32 under bf16)
  double e = 4;              // bytes per activation element (GPU bf16: 2; locally 4 throughout)
  GroupSpan tp, cp, dp, ep;  // dp: the data ranks (dp x cp) that reduce the gradients
  bool local_bf16 = false;   // the engine's bf16 path (its GEMMs, roundings, bf16 gathers)
  double moe_busiest = 1;    // local: busiest_rank_load for the layout's ep
  double b = 1, s = 1, h = 1, a = 1, t = 1, N = 1, Nl = 1;  // the shapes above
  BlockWidths w;
  double sq = 1;        // the rank's queries per sequence: s / cp (N = b sq)
  bool flash = false;   // GPU: the attention core fused (FlashAttention)
  bool fp8 = false;     // GPU: the linear layers' GEMMs in FP8 (software fp8_gemms)
  ComputeRates rates8;  // fp8: the rates at the FP8 peak
};
CostContext make_context(const PlanRequest& r, const Layout& l);

// A GEMM of the precision's linear layers, `count` of the same shape: locally the calibrated
// GEMM path (sgemm or oneDNN's bf16 matmul), on GPUs the preset's roofline.
double linear_gemm(const CostContext& c, const ComputeRates& R, double M, double N, double K,
                   double count = 1);
// A GEMM with a layer's weights (projections, MLPs, experts): linear_gemm, or under FP8 GEMMs
// (c.fp8) the same roofline at the FP8 peak on 1-byte operands plus, where `cast` (forward
// and input-gradient GEMMs), a cast-transpose of both operands: read 2 bytes, write the FP8
// value and its transpose (Transformer Engine's cast_transpose); the weight-gradient GEMM
// reads those transposes.
double weight_gemm(const CostContext& c, const ComputeRates& R, double M, double N, double K,
                   double count = 1, bool cast = true);

// The forward and input-gradient GEMMs of linear layers on M rows, each {outputs, inputs}:
// locally, a layer the engine runs on the dense bf16 tiles (local_on_tiles) at their rates;
// every other one by `gemm` (weight_gemm, or linear_gemm where `weights` is false) with its
// input gradient at the path's calibrated ratio.
struct LinearShape {
  double out = 0, in = 0;
};
Passes linear_passes(const CostContext& c, const ComputeRates& R, double M,
                     const std::vector<LinearShape>& layers, bool weights = true);

// The shared terms.
// The attention's projections (modern_attention.h): MHA's q/k/v (one column-parallel GEMM,
// (q + 2 kv) / t wide) and the row-parallel output (q / t in); MLA's five, its down-projections
// replicated on the rank's N rows, and its latent RMSNorms.
Passes attention_projections(const CostContext& c);
// The attention core as batched GEMMs over b a / t heads (QK^T over qk-wide heads, PV over
// v-wide ones: s/cp queries against s keys) and a softmax pass; its backward twice its forward (dP,
// dV, then dQ, dK; softmax backward). FlashAttention (c.flash): the causal half of the products, no
// softmax pass, backward 2.5x; under a bf16 plan whose software gives its kernel's published
// rate (attention_fwd_of_peak / _bwd_of_peak), that count at that rate. W: none.
Passes gemm_attention_core(const CostContext& c);
Passes norms_and_residuals(const CostContext& c);  // two Layer/RMSNorms, two residual adds
// fc, GELU, proj (GPT) or gate|up, SwiGLU, down (Llama), tp-split.
Passes dense_mlp(const CostContext& c);
// The same MLP of hidden width `width` (split over tp): the shared experts use it.
Passes mlp_of_width(const CostContext& c, double width);
// One direction's all-to-all (dispatch + combine, `comm` seconds) pipelined over `parts`
// pieces of the microbatch under `compute` seconds of the experts (the engine's overlapped
// all-to-all, Megatron's --overlap-moe-expert-parallel-comm with 2): a piece's exchange runs
// under another piece's experts, so the first piece's dispatch and the last's combine
// (comm / parts) and whatever the rest take beyond the others' compute stay exposed;
// parts <= 1: all of it.
double exposed_all_to_all(double comm, double compute, int parts);
// Dispatch + combine of `tokens` tokens' topk rows over ep, one direction (forward or
// backward): the all-to-all collective, or node-limited (a2a_max_nodes) as DeepSeek-V3's
// kernels send them: once per chosen remote node over IB, every row over NVLink, at once.
double expert_exchange_seconds(const CostContext& c, double tokens);
// Router and the rank's E / ep experts of the routed width on balanced rows (the rank's
// N / t tokens x topk: tokens split over tp), permutations as streams, then the shared
// experts (split over tp); the exposed dispatch and combine all-to-alls (both directions,
// exposed_all_to_all) in *ep_comm.
Passes streamed_moe(const CostContext& c, double* ep_comm);
// Context parallelism's K/V exchange in one layer, exposed (ring: the excess of each step
// over 1/cp of the attention core; all-gather: the gathers and the gradients' reduce-scatter).
// Locally, where the profile has the ring's hop CPU (cp_hop_s, cp_hop_byte_s), the ring is
// priced as that CPU on the rank instead: its copies and requests are the rank threads' work.
Passes cp_exchange(const CostContext& c, const Passes& core);
// Whether the profile prices the local ring's hops as CPU (cp_exchange_probe.cpp).
bool cp_hops_calibrated(const HardwareProfile& hw);
// ln_f, the logits GEMM against the vocab-parallel tied embedding and a cross-entropy of
// `ce` forward / `ce_bwd` backward seconds.
Passes head_compute(const CostContext& c, double ce, double ce_bwd);
// The vocab-parallel cross-entropy's max, sum and target logit, all-reduced over tp.
double cross_entropy_comm(const CostContext& c);
// A block's forward, backward and weight passes from its parts, then the exposed
// expert-parallel communication (half each way) and the recomputed forward in backward:
// selective repeats the attention core, full the whole forward.
BlockCosts finish_block(const CostContext& c, Passes p, double core_forward, double tp_comm,
                        double ep_comm);

}  // namespace mt::plan
