// --explain's assumptions: the structure of the cost model the candidate uses, then every
// constant with the value the code computes with, read from the same fields (never a
// number written into the text).
#include <sstream>

#include "kernels/dense_gemm_bf16.h"
#include "model/moe_layer.h"
#include "plan/cost_model.h"
#include "plan/cp_attention_factor.h"
#include "plan/software_profiles.h"
#include "plan/time_model.h"

namespace mt::plan {

namespace {

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

std::vector<std::string> common_lines() {
  return {
      "per block and microbatch: qkv, projection and two MLP GEMMs (tp-split), "
      "LayerNorm/residual/GELU as memory-bound passes; backward = input-gradient GEMMs (B) + "
      "weight-gradient GEMMs (W); the attention core as batched GEMMs over b*heads/tp with a "
      "softmax pass, its backward 2x its forward (locally: the engine's attention kernel at its "
      "calibrated rate, where measured)",
      "model FLOPs (MFU numerator): Korthikanti et al. 2022 App. A, recomputation not counted",
      "pipeline: the engine's schedule simulator with each stage's F/B/W costs (its blocks, "
      "the embedding on the first, ln_f + logits + cross-entropy on the last); p2p transfer "
      "of (b*s, h) [/tp under SP]; interleaved: a stage's cost split evenly over its chunks",
      "recompute: selective repeats the attention core's forward in backward, full the whole "
      "block's forward (with its tp communication)"};
}

// A cp rank's attention core: 1 / cp of the FLOPs at the calibrated cp factor of the run's
// precision (each has its own: the bf16 ring is measured apart), or, where the profile has
// none for it, the whole sequence's. Read through cp_attention_factor, as the cost model is.
std::string cp_core_text(const HardwareProfile& hw, bool bf16) {
  const char* precision = bf16 ? "bf16" : "fp32";
  if (cp_attention_factor(hw, bf16, 2) <= 0)
    return str(
        "context parallel: a cp rank's attention core priced at the whole sequence's "
        "FLOPs (this profile has no cp attention factor for ",
        precision, ": recalibrate to price s/cp queries at the ring's measured cost)");
  return str(
      "context parallel: a cp rank's attention core is s/cp queries over s keys (1/cp "
      "of the FLOPs) at the one-worker rate times the calibrated cp factor (",
      precision, ": cp 2 x", num(cp_attention_factor(hw, bf16, 2)), ", cp 4 x",
      num(cp_attention_factor(hw, bf16, 4)),
      "; other cp linear in log2 cp through them, beyond 4 extrapolated)");
}

// The ring's hops: the rank threads' CPU where calibrated, else transfers hidden under the
// attention (older profiles).
std::string cp_line(const HardwareProfile& hw, bool bf16) {
  if (!cp_hops_calibrated(hw))
    return cp_core_text(hw, bf16) +
           "; the ring's hops as transfers hidden under each step's attention, only the excess "
           "exposed (this profile has no cp hop CPU: recalibrate to price them as the ranks' "
           "work)";
  return cp_core_text(hw, bf16) + str("; each ring hop is ", num(hw.cp_hop_s * 1e6), " us + ",
                                      num(hw.cp_hop_byte_s * 1024e6),
                                      " us per KiB of its block of the rank's CPU (cp - 1 K/V hops "
                                      "forward, cp - 1 and cp dK/dV hops backward), on the shared "
                                      "cores like its compute");
}

std::vector<std::string> local_lines(const HardwareProfile& hw, bool bf16) {
  std::vector<std::string> a = {
      cp_line(hw, bf16),
      "local backend: ranks x threads beyond the calibrated cores time-share them: the "
      "pipeline is replayed with the computing stages sharing the cores (processor sharing; "
      "a waiting rank blocks), what follows it runs on every rank at once, and collectives pay "
      "the oversubscribed latency (and, where calibrated, their bytes the oversubscribed "
      "busbw: both as waits, measured among busy ranks that share the cores); a waiting rank "
      "yields its core, so the step is the larger of the work over the cores and the "
      "critical path with the waits; with a core per rank thread, ranks are priced at the "
      "calibrated parallel efficiency with every core computing, and a pipeline stage that "
      "computes while the others wait (warm-up, cool-down) at the busy cores' rate, one "
      "core's alone",
      "tensor parallel as the engine's linears issue it: 2 all-reduces of (b*s, h) forward + "
      "2 backward per block (SP: all-gather + reduce-scatter pairs, the weight pass gathering "
      "its inputs and output gradients again; gathers in bf16 under bf16); not overlapped; "
      "on cores of their own at the 16 MiB busbw and the 4-byte latency after a tp2 GEMM, "
      "both between rank threads bound as a step's",
      "local bf16: the linears' and MoE experts' GEMMs on oneDNN's bf16 matmul (calibrated "
      "peak, penalty, overhead), attention core as calibrated for a bf16 run, every GEMM input "
      "kept for backward rounded to bf16 once (output gradients of row-parallel linears once "
      "per pass), weight copies rounded once per step; MoE router, LayerNorm, GELU, softmax, "
      "reductions and AdamW stay fp32"};
  if (hw.oversubscribed_wake_s > 0)
    a.push_back(
        str("ranks x threads beyond the cores: every wait the schedule makes sleep (the "
            "pipeline's receives reached before their send, with tp or cp the first "
            "collective after each, with pp the world all-reduces) pays ",
            num(hw.oversubscribed_wake_s * 1e6),
            " us, the calibrated wake of a sleeping rank (rank_waits.h)"));
  if (hw.tiles_fwd_flops_bf16 > 0 && hw.tiles_bwd_flops_bf16 > 0)
    a.push_back(str("local bf16 in 1-thread ranks: the linears of up to ", kDenseBf16TilesMaxOut,
                    " outputs on the engine's dense AMX tiles (kernels/dense_gemm_bf16.h, the "
                    "rule the engine reads): forward at ",
                    num(hw.tiles_fwd_flops_bf16 * 1e-9), " GFLOP/s, input gradient at ",
                    num(hw.tiles_bwd_flops_bf16 * 1e-9),
                    " GFLOP/s per thread (calibrated), their weights packed once per step at ",
                    num(hw.tiles_pack_s_bf16 * 1e9),
                    " ns per element instead of rounded; weight gradients, wider layers and "
                    "2-thread ranks on oneDNN's figures"));
  else if (hw.peak_bf16 > 0)
    a.push_back(
        "local bf16: this profile has no dense tile probe (tiles_*_bf16: written before it, or "
        "no AMX), so every bf16 linear is priced on oneDNN's figures, also where a 1-thread "
        "rank on AMX runs the dense tiles (kernels/dense_gemm_bf16.h): re-run plan --calibrate");
  if (hw.microbatch_weight_s > 0 || hw.microbatch_weight_s_bf16 > 0)
    a.push_back(
        "every microbatch also pays the calibrated per-microbatch cost for each linear weight "
        "element on the rank (microbatch_weight_s*, fitted with the step factor to the "
        "reference step in 1, 2, 4 and 8 microbatches), a third in each of F, B and W");
  if (hw.moe_fwd_s > 0 && hw.grouped_fwd_flops > 0)
    a.push_back(
        "MoE: the fp32 router GEMMs, the experts as the engine runs them (model/expert_gemm.h): "
        "one grouped GEMM per matrix and pass over every local expert's rows, 4 rows C H "
        "FLOPs per pass at the calibrated grouped rate of the precision (grouped_*_flops*), "
        "the rest of the layer (routing, permutations, GELU, roundings) at its calibrated "
        "cost per expert hidden element; with ep the busiest rank's rows: N topk x (1 + cv "
        "sqrt(E/(E-1)) / sqrt(E/ep) x E[max of ep normals]), cv the calibrated load spread");
  else if (hw.moe_fwd_s > 0)
    a.push_back(
        str("MoE: the fp32 router GEMMs, each local expert's GEMMs over its rows (bf16: over the "
            "layer's row chunks of ",
            MoeLayer::kRowQuantum,
            " x 2^j rows, the last split into matmul_bf16's row pieces, "
            "padded to ",
            MoeLayer::kRowQuantum,
            " for the weight gradients), the rest of the layer "
            "(routing, permutations, GELU, roundings) at its calibrated cost per expert hidden "
            "element; with ep the busiest rank's rows: N topk x (1 + cv sqrt(E/(E-1)) / sqrt(E/ep) "
            "x E[max of ep normals]), cv the calibrated load spread"));
  else
    a.push_back(
        "MoE (no calibrated MoE figures in this profile): router GEMM, balanced routing "
        "(N*topk rows over the rank's E/ep experts), permutations as streams, two all-to-alls "
        "forward and two backward over ep; not overlapped");
  return a;
}

std::vector<std::string> gpu_lines(const HardwareProfile& hw) {
  return {"each linear's bias gradient is a memory-bound pass over its output gradient (in W)",
          str("tensor parallel: 2 all-reduces forward + 2 backward per block of (b*s, h) "
              "activations (SP: all-gather + reduce-scatter pairs, costed as the all-reduce they "
              "replace, and in backward the column-parallel inputs gathered again for their "
              "weight gradients, one all-gather per tp region); ",
              hw.tp_backward_overlap ? "the column-parallel backward's collectives under its GEMMs"
                                     : "not overlapped with compute",
              hw.tp_overlap_sms > 0 && hw.sms > 0 && (hw.tp_backward_overlap || hw.tp_comm_overlap)
                  ? str("; the overlapped collectives' kernels hold ", hw.tp_overlap_sms,
                        " of the ", num(hw.sms),
                        " SMs while they hide (tp_overlap_sms): the GEMM beside them runs in the "
                        "waves the SMs left need (256x128 tiles, one per SM), what it loses of "
                        "each hidden second counted in tp comm")
                  : std::string()),
          "MoE: router GEMM, balanced routing (N*topk rows over the rank's E/ep experts), two "
          "all-to-alls forward and two backward over ep; not overlapped",
          str("pipeline p2p: ",
              hw.p2p_blocking ? "blocking (each chunk's F and B pay the transfer)"
                              : "asynchronous (the transfer is the send->receive latency)",
              hw.p2p_scatter_gather
                  ? "; scatter/gather over tp (1/tp per link, then an all-gather over NVLink)"
                  : ""),
          "placement: tp innermost within a node, then dp, then pp (docs/contracts.md §7); "
          "a group spanning nodes gets min(NVLink busbw, members per node x NIC busbw)",
          "memory: the engine's own estimate (fp32 master weights, fp32 grads, AdamW moments); "
          "bf16 halves activations and adds a 2-byte weight copy; 3 GiB per GPU reserved"};
}

// The steps after the pipeline, with the constants the code uses.
std::vector<std::string> step_lines(const HardwareProfile& hw) {
  return {
      str("data parallel: gradients of ", num(hw.grad_reduce_bytes),
          " bytes per element reduced in buckets; ", num(hw.dp_overlap),
          " of the reduction may hide under the last microbatch's B+W (dp_overlap), the rest "
          "is exposed; ZeRO 1/2 reduce-scatter, then an exposed all-gather of the updated "
          "parameters",
          hw.grad_sync_placement == 1
              ? "; with pp each stage reduces after its own last backward, in the replay "
                "(grad_sync_placement 1), and the step waits for the last stage done"
          : hw.grad_sync_placement == 2
              ? "; with pp each stage starts a chunk's reduction in the replay, stage r r "
                "backwards after the chunk's last (Megatron-Core's delayed grad reduce, "
                "grad_sync_placement 2; without interleaving the first stage's from its last "
                "backward, dp_overlap of it hidden), and the step waits for the last stage "
                "done"
              : "",
          hw.tied_embedding_reduce ? "; with pp the tied embedding's gradient all-reduce "
                                     "between first and last stage follows, exposed"
                                   : "",
          hw.collective_sms > 0 && hw.sms > 0
              ? str("; the part that hides holds ", hw.collective_sms, " of the ", num(hw.sms),
                    " SMs while it runs (collective_sms): the blocks' linear GEMMs beside it run "
                    "in the waves the SMs left need, the rest at that share; what they lose of "
                    "each hidden second added to dp exposed")
              : std::string()),
      str("ZeRO 3: parameter all-gather before forward and backward and gradient "
          "reduce-scatter per block and microbatch; ",
          "with zero3_overlap ", num(hw.zero3_overlap),
          " they run on their own stream, one at a time, ", hw.zero3_prefetch,
          " gather(s) ahead of the compute (zero3_prefetch): each chunk's first gather, "
          "its last reduce-scatter and what a block's collectives take beyond its compute "
          "stay exposed (without overlap every collective is)"),
      str("optimizer: ", num(hw.optimizer_bytes), " bytes streamed per updated element in ",
          hw.optimizer_kernels, " passes (optimizer_bytes, optimizer_kernels); plus ",
          hw.world_all_reduces, " latency-bound all-reduces over the world (world_all_reduces)",
          hw.grad_buffer_bytes > 0
              ? str("; plus ", num(hw.grad_buffer_bytes),
                    " bytes streamed per element of the stage's whole gradient buffer "
                    "(grad_buffer_bytes: the dp wrapper's zeroing, checks and scaling, not "
                    "the ZeRO shard's)",
                    hw.grad_sync_placement > 0 && hw.grad_sync_pass_bytes > 0
                        ? str(", of which ", num(hw.grad_sync_pass_bytes),
                              " run at each chunk's reduction in the replay with pp "
                              "(grad_sync_pass_bytes)")
                        : std::string())
              : std::string())};
}

}  // namespace

std::vector<std::string> time_assumptions(const PlanRequest& r) {
  const HardwareProfile& hw = r.hardware;
  std::vector<std::string> a = common_lines();
  if (r.attention.is_mla()) a.push_back(attention_assumption(r.attention));
  // A local search runs one precision: fp32 unless bf16 is asked for (search.cpp).
  const bool bf16 = r.precision == Precision::bf16;
  for (const std::string& line : hw.local ? local_lines(hw, bf16) : gpu_lines(hw))
    a.push_back(line);
  for (const std::string& line : step_lines(hw)) a.push_back(line);
  for (const std::string& line : software_lines(hw)) a.push_back(line);
  return a;
}

}  // namespace mt::plan
