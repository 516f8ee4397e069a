// What the planner knows about a machine: compute rates, memory, and the links between
// devices. A profile is a table of constants (docs/planner.md gives the source of each);
// the cost formulas live in hardware_costs.h. Presets describe NVIDIA DGX-style nodes
// (8 GPUs joined by NVSwitch, one InfiniBand NIC per GPU); "local" is this machine as
// measured by `meshtrain plan --calibrate` (ranks are threads or processes on its cores).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/precision.h"

namespace mt::plan {

// What a GPU keeps for itself (CUDA context, library workspaces): not offered to a rank.
constexpr int64_t kGpuReserveBytes = int64_t(3) << 30;

struct HardwareProfile {
  std::string name;
  bool local = false;  // meshtrain's own CPU engine (calibrated), not a GPU preset
  int devices_per_node = 8;
  double memory_bytes = 0;  // per device (local: the memory all ranks share)
  // Dense matrix-multiply peaks per device, FLOP/s. fp32 on a GPU means TF32 tensor cores
  // (what cuBLAS uses for fp32 GEMMs with TF32 allowed); bf16 is twice that on A100/H100.
  double peak_fp32 = 0, peak_bf16 = 0;
  // FP8 tensor cores, dense (0 = none: A100 and CPUs). Used only where the software runs its
  // linear layers' GEMMs in FP8 (fp8_gemms below).
  double peak_fp8 = 0;
  // Fraction of the peak a large, well-shaped GEMM reaches (cuBLAS / oneDNN measurements).
  double gemm_efficiency = 1;
  // A GEMM whose smallest dimension is d runs at efficiency * d / (d + gemm_half_dim):
  // small tiles waste the machine (tile quantisation, too few thread blocks/threads).
  double gemm_half_dim = 0;
  // Local only (0 = not measured: gemm_half_dim applies as above): the penalty of few rows
  // (M, a microbatch's tokens), measured on a GEMM of few rows (kernel_probes.cpp): a small
  // M costs the GEMM differently from a small K (the weight operand is packed for few
  // rows). Where measured, both apply at once: efficiency / (1 + gemm_half_rows / M +
  // gemm_half_dim / min(N, K)) (hardware_costs.h).
  double gemm_half_rows = 0;
  // Local only (0 = not measured: gemm_half_rows holds at every M): the row share the
  // step's own linears show at kProbeStepRows rows (hardware_costs.h; forward, input and
  // weight gradient, caches emptied as inside a step, against the same at
  // kProbeStepRowsRef rows; few_rows_probe.cpp). Below the 128-row probe the share grows
  // faster than 1 / M (a weight fetched cold for few rows, the weight gradient's short
  // reduction), so it applies at and below kProbeStepRows, gemm_half_rows at and above
  // kProbeFewRows, linear in log2 M between.
  double gemm_few_rows = 0;
  // Streaming multiprocessors (GPU datasheets; 0 = no wave quantisation, e.g. local CPUs).
  double sms = 0;
  double memory_bw = 0;          // bytes/s a memory-bound kernel streams per device
  double kernel_overhead_s = 0;  // per kernel launch / OpenMP region
  // Collective bus bandwidth (nccl-tests' busbw, bytes/s per rank) and latency per call,
  // within a node and across nodes (the latter per NIC, i.e. per GPU).
  double intra_busbw = 0, intra_latency_s = 0;
  double inter_busbw = 0, inter_latency_s = 0;
  double p2p_bw_intra = 0, p2p_bw_inter = 0;  // point-to-point (pipeline sends), bytes/s
  // Local only (0 = not measured: the GEMM and streaming formulas apply). The engine's
  // attention core is its own kernel, not a GEMM: its measured rate, FLOP/s per thread
  // (4 B T^2 C forward, twice that backward, causal mask not halved). Pointwise passes
  // (GELU's tanh, LayerNorm) are compute-bound on a CPU: seconds per element per thread.
  double attention_fwd_flops = 0, attention_bwd_flops = 0;
  double pointwise_s = 0;
  // Local only, --precision bf16 (0 = not measured; bf16 is then refused for local plans):
  // the bf16 GEMM (oneDNN, kernels/matmul_bf16.h) has its own small-dimension penalty and
  // per-call overhead (peak_bf16 above is its one-thread peak); rounding fp32 to bf16
  // (kernels/bf16.h to_bf16) costs seconds per element per thread; the attention core a
  // bf16 run uses, FLOP/s per thread as above.
  double gemm_half_dim_bf16 = 0, bf16_overhead_s = 0, bf16_convert_s = 0;
  double gemm_half_rows_bf16 = 0;  // as gemm_half_rows, on the bf16 path (0: not measured)
  double gemm_few_rows_bf16 = 0;   // as gemm_few_rows, on the bf16 path (0: not measured)
  double attention_bf16_fwd_flops = 0, attention_bf16_bwd_flops = 0;
  // Local only (0 = not measured, or the kernel keeps the (b, NH, T, T) probabilities): 1
  // when the gpt2 block's attention kernel of the precision keeps row statistics at the
  // probe's shape (kernels/attention.h attention_saved_form), where --recompute selective
  // has nothing to drop and does not rerun the core (gpt_block.cpp, stop 47).
  double attention_row_stats = 0, attention_row_stats_bf16 = 0;
  // Local only (0 = not measured: the register tiles where attention_row_stats[_bf16] says,
  // else none): the attention kernels the CPU runs (kernels/attention.h AttentionIsa::bits:
  // 1 the fp32 AVX-512 tiles, 2 the AVX512-BF16 tiles, 4 oneDNN's batched AMX matmuls, 8 the
  // AMX tiles, summed), from which a local plan's memory counts the kernel, saved form and
  // scratch the CPU picks at every head dim (plan/memory_model.h profile_kernels), not the
  // planner's host's.
  double attention_kernels = 0;
  // Local only (0 = not measured: a cp rank's attention core is priced at the whole
  // sequence's FLOPs): what the engine's context-parallel attention (the ring's per-step flash
  // calls, their merges and the block's copies) costs one cp rank over 1 / cp of the
  // one-worker kernel, at cp 2 and 4, per precision (plan/cp_attention_probe.cpp).
  double cp2_attention_factor = 0, cp4_attention_factor = 0;
  double cp2_attention_factor_bf16 = 0, cp4_attention_factor_bf16 = 0;
  // Local only (0 = not measured: the ring's hops priced as transfers hidden under the
  // attention, the pricing before): the CPU one cp rank's thread spends per ring hop (the
  // requests, the channel's lock, the waits) and per byte of the hop's block (the local
  // backend's copy), measured on the ring's own calls (plan/cp_exchange_probe.cpp).
  double cp_hop_s = 0, cp_hop_byte_s = 0;
  // Local only, bf16 (0 = not measured, or no AMX: the linears are priced on oneDNN's
  // figures above): the dense AMX tile kernel that 1-thread ranks run for layers of up to
  // kDenseBf16TilesMaxOut outputs (kernels/dense_gemm_bf16.h), forward and input-gradient
  // FLOP/s of one thread at the block's linear shapes, and the seconds per weight element of
  // packing both of a weight's layouts, paid once per change of the weights (a step).
  double tiles_fwd_flops_bf16 = 0, tiles_bwd_flops_bf16 = 0, tiles_pack_s_bf16 = 0;
  // Local only (0 = not measured: the backward GEMMs cost what the forward does): the
  // linear layer's input- and weight-gradient GEMM time over the time the GEMM formula
  // gives the same shape at the peak (its forward), per precision.
  double gemm_input_grad_ratio = 0, gemm_weight_grad_ratio = 0;
  double gemm_input_grad_ratio_bf16 = 0, gemm_weight_grad_ratio_bf16 = 0;
  // Local only (0 = not measured: intra_latency_s): the latency per collective step when
  // more rank threads than cores share the machine (waiters block and wait to be woken).
  double oversubscribed_latency_s = 0;
  // Local only (0 = not measured: intra_busbw, the bytes stretched by the sharing like any
  // work): the bus bandwidth of an all-reduce's bytes among 2 x cores busy rank threads, as
  // the wall they add (the sharing included): what a collective's bytes cost a step when
  // more rank threads than cores share the machine.
  double oversubscribed_busbw = 0;
  // Local only (0 = not measured: no wake-up priced): the wall one block-and-wake of a rank
  // thread costs when 2 x cores rank threads share the cores and the waiter's core has
  // nothing else to run (the case where the local backend's waiter sleeps): from the peer's
  // send to the receiver running again, the median over the probe's waits
  // (plan/wake_probe.cpp); the planner charges it for every wait a layout's schedule
  // blocks on (rank_waits.h).
  double oversubscribed_wake_s = 0;
  // Local only (0 = not measured: 1): each core's compute rate when every core computes, over
  // its rate alone (shared physical cores, caches, memory bandwidth); k busy cores of n run
  // at 1 - (1 - this) (k - 1) / (n - 1).
  double parallel_efficiency = 0;
  // Local only (0 = not measured: 1): a real one-rank `meshtrain train` step of a reference
  // model (4L d256 T128 B8) over the step this profile's kernel figures predict for it, per
  // precision: the per-step work no kernel figure holds (page faults, zeroing, the host's
  // variation between a kernel's best run and a step's median). Every local compute cost
  // is scaled by it.
  double step_factor_fp32 = 0, step_factor_bf16 = 0;
  // Local only (0 = not measured: nothing): what each microbatch costs a real step beyond
  // the kernels above, per element of the linears' weights on the rank (fitted with the step
  // factor to the reference step in 1, 2, 4 and 8 microbatches; under bf16 perf puts the
  // difference in oneDNN's GEMM code and to_bf16, work that grows with the weights each
  // call touches), per precision.
  double microbatch_weight_s = 0, microbatch_weight_s_bf16 = 0;
  // Local only (0 = not measured: the MoE layer's non-GEMM work is modelled as streams): the
  // engine's MoE layer (model/moe_layer.cpp) timed per pass (forward, backward_input,
  // backward_weight) at one shape, less the time the planner's GEMM formula gives its
  // router and expert GEMMs (the same calls, rows and bf16 row chunks): seconds per element
  // of the experts' hidden activations (rows x 4C) per thread, per precision. It holds the
  // routing, the token permutations, GELU, the bf16 roundings, the zeroing of the backward's
  // row buffers and the cache misses on the layer's fp32 intermediates.
  double moe_fwd_s = 0, moe_bwd_s = 0, moe_wgt_s = 0;
  // Local only (0 = not measured: the experts priced as one GEMM each on the linears'
  // path): the engine's grouped expert GEMMs (kernels/grouped_gemm.h, one call per matrix
  // and pass over every local expert), FLOP/s of one thread per pass at the MoE rest's
  // reference shape, caches emptied (grouped_gemm_probe.cpp), per precision.
  double grouped_fwd_flops = 0, grouped_bwd_flops = 0, grouped_wgt_flops = 0;
  double grouped_fwd_flops_bf16 = 0, grouped_bwd_flops_bf16 = 0, grouped_wgt_flops_bf16 = 0;
  double moe_fwd_s_bf16 = 0, moe_bwd_s_bf16 = 0, moe_wgt_s_bf16 = 0;
  // Local only (0 = not measured: even routing): the coefficient of variation of the
  // per-expert load (rows an expert receives over their mean, within one block and step)
  // of the engine's router during a short training run (reference_steps.cpp); expert
  // parallelism waits for the busiest ep rank, whose expected load follows from it
  // (busiest_rank_load, local_costs.cpp).
  double moe_load_cv = 0;
  // Local only (0 = not measured): what the calibration's rounds (calibration_rounds.h) read
  // for the reference step in one microbatch, per precision: its median over the rounds,
  // and the slowest and fastest round over that median (step_high_* >= 1 >= step_low_*).
  // The plan states every local prediction with this band (the machine's own drift within
  // one calibration); the closed loop re-runs the reference step between batches of layouts
  // and flags those measured after the machine left it. Nothing here scales a prediction.
  double reference_step_s = 0, reference_step_s_bf16 = 0;
  double step_low_fp32 = 0, step_high_fp32 = 0, step_low_bf16 = 0, step_high_bf16 = 0;
  // Local only: the MPI backend between two processes of this machine (0 = not measured).
  double mpi_busbw = 0, mpi_latency_s = 0, mpi_p2p_bw = 0;
  int cores = 0;
  std::vector<std::string> sources;  // one line per constant, printed by --explain
  // How the training software the plan is for behaves (docs/planner.md, "Software
  // profiles"; one table per software in plan/software_profiles.cpp, `meshtrain plan
  // --software NAME`). The defaults are meshtrain's own engine as the GPU model assumes it;
  // "megatron-lm-2021" / "megatron-lm-2022" are the Megatron-LM versions behind the
  // published runs; every local profile has "meshtrain-local", the engine measured here.
  std::string software = "meshtrain";
  // Fraction of the data-parallel gradient reduction that may run under the last
  // microbatch's backward (1: bucketed and overlapped; 0: reduced after the pipeline).
  double dp_overlap = 1;
  double grad_reduce_bytes = 4;  // bytes per gradient element reduced over dp
  // Dropout on the attention probabilities and the two residual branches (PyTorch's
  // dropout writes a 1-byte mask; the probabilities' dropout is a separate pass).
  bool dropout = false;
  // The logits cast to fp32 before a multi-pass vocab-parallel cross-entropy.
  bool fp32_cross_entropy = false;
  double optimizer_bytes = 32;  // bytes streamed per updated element by the optimizer step
  int optimizer_kernels = 2;    // ... in this many passes (each pays the kernel overhead)
  // Bytes streamed each step per element of a stage's WHOLE gradient buffer (every parameter
  // of the stage's ranks, not the ZeRO shard the optimizer updates), on the compute stream:
  // the data-parallel wrapper's own passes (Megatron: zeroing the buffer, a NaN-check norm
  // and the 1/dp scaling before the collective; time_model.cpp, grad_buffer_seconds).
  double grad_buffer_bytes = 0;
  // Where the pipeline replay places each stage's data-parallel gradient sync (with pp > 1,
  // ZeRO 0-2, dp > 1): 0 after the pipeline, the slowest stage's added to the makespan; 1
  // each stage's after its own last backward; 2 Megatron-Core's delayed grad reduce (stage
  // r starts a chunk's sync r backwards after the chunk's last; the first stage without
  // interleaving from its last backward's hooks). The step's optimizer starts when every
  // stage's sync is done (time_model.cpp, add_grad_syncs). grad_sync_pass_bytes of
  // grad_buffer_bytes run at each chunk's sync on the compute stream (the NaN check and the
  // 1/dp scaling), delaying what the stage computes and sends after it.
  int grad_sync_placement = 0;
  double grad_sync_pass_bytes = 0;
  // Latency-bound all-reduces over the whole world per step (gradient norm, loss, ...).
  int world_all_reduces = 2;
  // Fraction of the ZeRO-3 gathers and reduce-scatters that may hide under the compute of
  // the same pass (1: prefetched; 0: the ranks' own cores run them).
  double zero3_overlap = 1;
  // With pp, the tied embedding's gradient is all-reduced between the first and last stage
  // after the pipeline, on the critical path.
  bool tied_embedding_reduce = true;
  // Pipeline sends: blocking (the stage waits for its transfer) and split over the tp ranks
  // (each sends 1/tp of the boundary, the receivers all-gather it).
  bool p2p_blocking = false, p2p_scatter_gather = false;
  // Interleaved only with equal chunks and microbatches divisible by pp (Megatron-LM).
  bool even_chunks = false;
  // Per microbatch, each parameter's gradient is produced in a fresh 16-bit tensor and then
  // added into the reduction buffer (Megatron's DDP hook: main_grad.add_(grad)); meshtrain
  // accumulates in the weight-gradient GEMM itself.
  bool grad_accum_pass = false;
  // The tp collectives of a column-parallel linear's backward run under its GEMMs
  // (Megatron-LM 2022's async tensor-parallel communication).
  bool tp_backward_overlap = false;
  // Under SP, the forward's all-gathers and reduce-scatters and the row-parallel backward's
  // all-gathers pipelined with the GEMM they feed or follow (Transformer Engine's userbuffers,
  // Megatron-Core's --tp-comm-overlap): only what exceeds that GEMM is exposed. Applies with
  // tp_backward_overlap (the same option's bulk overlaps of the column-parallel backward).
  bool tp_comm_overlap = false;
  int max_zero = 3;  // the highest ZeRO stage the software has
  // Context parallelism: the largest --cp the software has (1: none), and whether it
  // all-gathers K/V once per layer (Llama 3) rather than passing blocks around a ring.
  int max_cp = 1;
  bool cp_allgather = false;
  // Memory from the software's own accounting (plan/gpu_memory.h: Korthikanti et al. 2022's
  // per-layer activations, 16-bit weights, fp32 master and moments) rather than this
  // engine's estimate of what it would allocate.
  bool paper_memory = false;
  // The attention core fused (FlashAttention): no s x s probabilities in memory or passes
  // over them, and the causal half of the score and value products skipped. The Llama
  // block is flash attention in every software (this engine's included).
  bool flash_attention = false;
  // The fused attention kernel's published rate, as fractions of the bf16 peak, forward and
  // backward, over FlashAttention's count (the causal half; backward 2.5x forward): where the
  // software's kernel has a published figure at the runs' shape (cost_model.cpp,
  // gemm_attention_core). 0: the core priced as batched GEMMs with K = the head width at the
  // preset's GEMM efficiency (on H100 at head width 128, 297 TFLOP/s: FlashAttention-2's).
  double attention_fwd_of_peak = 0, attention_bwd_of_peak = 0;
  // ZeRO 1/2: the all-gather of the updated parameters, param_gather_bytes per element (the
  // parameters' own dtype: 2 where the software keeps bf16 model weights beside fp32 master
  // ones), and whether it runs under the next step's first microbatch's forward
  // (Megatron-Core's --overlap-param-gather, FSDP's prefetch): a fraction of that forward
  // hides it, the rest of the gather stays exposed (time_model.cpp, dp_exposed).
  double param_gather_overlap = 0;
  double param_gather_bytes = 4;
  // ZeRO 3: layers whose parameters are gathered ahead of the one computing (1: the next
  // layer's gather runs under this layer's compute; 0: none ahead, every gather exposed).
  int zero3_prefetch = 1;
  // MoE: pieces each microbatch's all-to-alls are pipelined over under the experts' compute
  // (1: not overlapped; exposed_all_to_all in cost_model.h), and whether in a DualPipe-V F&B
  // pair each half's all-to-all runs under the other half's compute (DeepSeek-V3, 3.2.1).
  int a2a_overlap_parts = 1;
  bool fb_a2a_overlap = false;
  // The linear layers' GEMMs (attention projections, MLPs, experts) in FP8 at peak_fp8, each
  // forward and input-gradient GEMM paying a cast-transpose of its operands; the attention
  // core, router, head and everything else at bf16 (DeepSeek-V3 section 3.3, Transformer
  // Engine's FP8 recipes). Applies to --precision bf16 plans.
  bool fp8_gemms = false;
  // Memory (paper_memory) and time: the activations a Linear keeps for its backward cached
  // in FP8 (1 byte and a 4-byte scale per 1 x 128 tile), the MoE SwiGLU's input cached in
  // FP8 and its output recomputed in backward (DeepSeek-V3 section 3.3.3).
  bool fp8_activation_cache = false;
  // Every RMSNorm's output and the attention's up-projections' outputs (Q, K, V) not kept
  // but recomputed in backward from the norm's input and the projections' input (DeepSeek-V3
  // section 3.2.3: RMSNorm and MLA up-projection recomputation).
  bool norm_up_proj_recompute = false;
  // The attention's up-projections' outputs (Q, K, V) alone not kept but recomputed, with
  // RoPE, from the projections' input, which is kept (Megatron-Core's recompute_modules
  // "mla_up_proj"; norm_up_proj_recompute implies it).
  bool up_proj_recompute = false;
  // The dense layers' MLP recomputed in backward from its input (Megatron-Core's
  // recompute_modules "mlp": the dense MLP submodule, not the MoE layers).
  bool dense_mlp_recompute = false;
  // Node-limited expert dispatch (DeepSeek-V3 section 3.2.2): a token's routed rows go to at
  // most this many nodes, sent once per node over InfiniBand and forwarded over NVLink (0:
  // every row its own all-to-all message, priced as the collective).
  int a2a_max_nodes = 0;
  // SMs the communication kernels hold while they run beside computation (DeepSeek-V3
  // 3.2.2: 20 of the H800's 132): the computation an F&B pair overlaps with its all-to-alls
  // runs on the rest.
  int comm_sms = 0;
  // SMs an NCCL data-parallel collective holds while it runs under computation (the
  // gradient reduction hidden under the last backward, ZeRO 1/2's parameter all-gather
  // under the next forward): NCCL runs one CTA per channel and a CTA does not share its SM
  // with compute kernels (NVIDIA/nccl #689), so the computation it hides under runs on the
  // rest: its GEMMs in the waves sms - collective_sms SMs need (held_sms_loss), the rest of
  // it at the held share (0: free).
  int collective_sms = 0;
  // SMs the tp overlaps' communication kernels hold beside the GEMMs they hide under
  // (Transformer Engine's userbuffers bulk and pipeline overlaps: num_sm; its ring exchange
  // copies with the copy engines and holds none; NCCL's channels for an async collective):
  // each hidden second costs the GEMM's held_sms_loss of a second (0: free).
  int tp_overlap_sms = 0;
  // Pipeline schedules the software has ("" = every schedule the engine has).
  std::vector<std::string> schedules;
};

// The software behaviour fields for NAME (software_profiles.h: "meshtrain",
// "megatron-lm-2021", "megatron-lm-2022" on GPU hardware, "meshtrain-local" on local
// profiles); UsageError naming the known ones otherwise.
void apply_software(HardwareProfile& h, const std::string& name);
// The GPU software a plan may name with --software.
const std::vector<std::string>& software_names();

// "a100-80gb", "h100-80gb"; UsageError naming the known ones otherwise.
HardwareProfile preset_profile(const std::string& name);
const std::vector<std::string>& preset_names();

// A TOML profile ([hardware] with the field names above, plan/profile_fields.h), read as a
// user's input file (core/input_file.h: never blocks on a FIFO); UsageError on a missing or
// special file, an unknown key, a wrong type or a value outside its range.
HardwareProfile load_profile(const std::string& path);
// The same fields as TOML (what --calibrate stores).
std::string profile_to_toml(const HardwareProfile& h);

// The profile a run on `backend` ("local" | "mpi") sees: for a local profile under mpi,
// the MPI figures replace the threads backend's link figures (UsageError when the profile
// has none). GPU presets ignore the backend.
HardwareProfile for_backend(const HardwareProfile& h, const std::string& backend);

// The peak for a precision.
double peak_flops(const HardwareProfile& h, Precision precision);

// Local profiles: whether --calibrate measured every figure a bf16 plan needs (profiles
// written before bf16 was calibrated have none of them).
bool has_local_bf16(const HardwareProfile& h);
// Whether the calibration ran the oversubscribed probe (its sources line names
// oversubscribed_latency_s): then a 0 there is a measurement (a one-float all-reduce added
// nothing measurable to busy ranks sharing the cores), not a profile written before it.
bool oversubscribed_probed(const HardwareProfile& h);

}  // namespace mt::plan
