#include "plan/software_profiles.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "plan/modern_software.h"
#include "plan/profile_fields.h"

namespace mt::plan {

namespace {

// Megatron-LM's training step as of the papers' code, shared by both versions.
constexpr const char* kMegatronStep =
    "megatron/training.py train_step(): forward_backward_func(), then allreduce_gradients() "
    "on the whole contiguous buffer: no overlap with backward (--overlap-grad-reduce came "
    "with Megatron-Core, 2023)";
constexpr const char* kMegatronDropout =
    "GPT defaults --attention-dropout 0.1 --hidden-dropout 0.1: torch dropout on the "
    "attention probabilities after the fused softmax (read, write, 1-byte mask) and the "
    "fused bias-dropout-add of both residual branches";
constexpr const char* kMegatronLoss =
    "output.float(), then vocab_parallel_cross_entropy's max/sub/exp/sum/div passes (38 "
    "bytes per logit forward, 14 backward) unless --fp16-lm-cross-entropy";
constexpr const char* kMegatronP2p =
    "p2p_communication.py _communicate(): batch_isend_irecv, wait, torch.cuda.synchronize()";
constexpr const char* kMegatronScatter =
    "--scatter-gather-tensors-in-pipeline (default on): 1/tp of the tensor per rank, "
    "gather_split_1d_tensor over tp after";
constexpr const char* kMegatronChunks =
    "schedules.py asserts layers divisible by pp x v and microbatches by pp";
constexpr const char* kMegatronZero =
    "no ZeRO: its optimizer keeps the full fp32 state on every dp rank (the distributed "
    "optimizer came later and is not modelled)";
// The whole contiguous gradient buffer divided by the dp size before its all-reduce, at
// every dp size (dp 1 divides by 1), at the buffer's precision (read and write); its zeroing
// is in optimizer_bytes (no ZeRO: the optimizer updates the whole buffer).
// Each stage's gradient all-reduce after its own part of the pipeline (issue #30, stop 47).
constexpr const char* kMegatronStageSync =
    "training.py train_step (fda81a2, 55ba1f7): each stage calls allreduce_gradients once "
    "its forward_backward_func returns (its last backward), not waiting for the others; the "
    "optimizer's gradient norm is all-reduced over the model-parallel group "
    "(optimizer/clip_grads.py), so the step waits for every stage's";
constexpr const char* kMegatronGradScale =
    "megatron/model/distributed.py allreduce_gradients(): buffer_.data /= "
    "get_data_parallel_world_size() over the whole buffer (read + write)";
constexpr const char* kMegatronSmall = "gradient-norm and loss all-reduces over the world";
constexpr const char* kMegatronTied =
    "the tied embedding's gradient all-reduced between the first and last stage after the "
    "pipeline, before the optimizer (on the critical path)";
constexpr const char* kNoZero3 = "no ZeRO 3 (max_zero 0)";
constexpr const char* kNoMoe = "no MoE in the papers' runs (no all-to-all overlap modelled)";
constexpr const char* kMegatronNoCp = "no context parallelism (it came with Megatron-Core, 2023)";
// The engine has --cp (docs/context_parallel.md), but with cp open for GPT blocks the GPU
// search of docs/planner.md's 175B on 1024 GPUs exceeds its work budget and is refused
// (issue #30 item 6, found on this branch): not offered until the search is bounded.
constexpr const char* kMeshtrainCp =
    "the engine's --cp (ring or allgather, llama and GPT blocks: docs/context_parallel.md); "
    "searched with micro-batches below cp only (search.cpp, cp_micro_batches)";
constexpr const char* kEngineTpComm = "the engine's tp collectives run between its GEMMs";
constexpr const char* kNoFp8 = "16-bit GEMMs (A100: no FP8 tensor cores)";
constexpr const char* kMegatronRecompute =
    "--recompute-granularity selective or full only (Korthikanti et al. 2022)";
constexpr const char* kNoNodeLimit = "every routed row its own all-to-all message";
constexpr const char* kNoCommSms = "no communication kernels beside computation";
constexpr const char* kNoFusedAttention =
    "no fused attention kernel: the core as batched GEMMs (flash_attention 0)";
constexpr const char* kMegatronSoftmax =
    "fused scale-mask-softmax: the s x s probabilities are stored, the masked half computed";

const std::vector<SoftwareTable> kTables = {
    {"meshtrain",
     {},
     {{"dp_overlap", 1,
       "fp32 gradients reduced in buckets as the last microbatch's backward "
       "produces them"},
      {"grad_reduce_bytes", 4, "fp32 gradients"},
      {"optimizer_bytes", 32,
       "AdamW reads param, grad and two moments and writes param and "
       "moments (28), the gradient-norm pass reads the gradient (4)"},
      {"optimizer_kernels", 2, "AdamW and the gradient-norm pass"},
      {"grad_buffer_bytes", 0,
       "the engine's reduction reads the gradients in place: no pass of its own"},
      {"grad_sync_placement", 0,
       "the engine's reduction as the GPU model has priced it: after the pipeline, the slowest "
       "stage's added to the makespan (the engine's own per-stage placement not re-read)"},
      {"grad_sync_pass_bytes", 0, "no pass of its own (grad_buffer_bytes 0)"},
      {"world_all_reduces", 2, "gradient-norm and loss all-reduces over the world"},
      {"zero3_overlap", 1, "ZeRO 3 gathers prefetched under the pass before"},
      {"tied_embedding_reduce", 1, kMegatronTied},
      {"dropout", 0, "no dropout"},
      {"fp32_cross_entropy", 0, "cross-entropy at the activation precision"},
      {"p2p_blocking", 0, "asynchronous sends: the transfer is the send->receive latency"},
      {"p2p_scatter_gather", 0, "the whole boundary over one link"},
      {"even_chunks", 0, "any partition of the chunks"},
      {"grad_accum_pass", 0, "the weight-gradient GEMM accumulates"},
      {"tp_backward_overlap", 0, "tp collectives not overlapped"},
      {"tp_comm_overlap", 0, kEngineTpComm},
      {"max_zero", 3, "ZeRO 1-3"},
      {"max_cp", 1 << 20, kMeshtrainCp},
      {"cp_allgather", 0, "the engine's default --cp-comm ring"},
      {"paper_memory", 0,
       "this engine's own estimate of what it allocates (train/memory_estimate.h)"},
      {"flash_attention", 0,
       "the GPT block keeps its attention probabilities (the Llama block is flash attention)"},
      {"attention_fwd_of_peak", 0, "the core as batched GEMMs at the preset's GEMM efficiency"},
      {"attention_bwd_of_peak", 0, "the core as batched GEMMs at the preset's GEMM efficiency"},
      {"param_gather_overlap", 0, "ZeRO 1/2's all-gather of the updated parameters after the step"},
      {"param_gather_bytes", 4, "the engine gathers its fp32 parameters (data_parallel.cpp)"},
      {"zero3_prefetch", 1,
       "two gather buffers (parallel/data_parallel/param_gathers.cpp): the next "
       "block's gather runs while this one computes"},
      {"a2a_overlap_parts", 1,
       "the expert all-to-alls between the router and the experts, exposed (docs/moe.md)"},
      {"fb_a2a_overlap", 0,
       "DualPipe-V's F&B halves run one after the other (schedule/execution_order.h)"},
      {"fp8_gemms", 0, "bf16 GEMMs at most (model/precision.h has fp32 and bf16)"},
      {"fp8_activation_cache", 0, "the engine's own estimate (paper_memory 0)"},
      {"norm_up_proj_recompute", 0, "--recompute none, selective or full only"},
      {"up_proj_recompute", 0, "--recompute none, selective or full only"},
      {"dense_mlp_recompute", 0, "--recompute none, selective or full only"},
      {"a2a_max_nodes", 0, kNoNodeLimit},
      {"comm_sms", 0, kNoCommSms},
      {"collective_sms", 0,
       "the engine's collectives are its own (comm/), not NCCL's: no SM share counted"},
      {"tp_overlap_sms", 0, kEngineTpComm}},
     "offered: the engine's own DualPipe-V (--schedule dualpipev, "
     "schedule/schedule_dualpipev.cpp)"},
    {"megatron-lm-2021",
     {"1f1b", "interleaved"},
     {{"dp_overlap", 0, kMegatronStep},
      {"grad_reduce_bytes", 2,
       "fp16 gradient buffer (--fp16 without "
       "--accumulate-allreduce-grads-in-fp32, the default)"},
      {"optimizer_bytes", 54,
       "Float16OptimizerWithFloat16Params + apex FusedAdam: zero the "
       "grads (2), fp16 -> fp32 main grads (6), unscale + inf check "
       "(8), norm (4), Adam (28), main -> fp16 params (6)"},
      {"optimizer_kernels", 2, "the optimizer's passes fused as in the 32-byte model"},
      {"grad_buffer_bytes", 4, kMegatronGradScale},
      {"grad_sync_placement", 1, kMegatronStageSync},
      {"grad_sync_pass_bytes", 4,
       "the fp16 buffer's 1/dp scaling (grad_buffer_bytes): in "
       "allreduce_gradients, on each stage before its all-reduce"},
      {"world_all_reduces", 2, kMegatronSmall},
      {"zero3_overlap", 1, kNoZero3},
      {"tied_embedding_reduce", 1, kMegatronTied},
      {"dropout", 1, kMegatronDropout},
      {"fp32_cross_entropy", 1, kMegatronLoss},
      {"p2p_blocking", 1, kMegatronP2p},
      {"p2p_scatter_gather", 1, kMegatronScatter},
      {"even_chunks", 1, kMegatronChunks},
      {"grad_accum_pass", 1,
       "megatron/model/distributed.py param hook main_grad.add_(grad) per "
       "parameter per microbatch (read the 16-bit grad, read + write "
       "the buffer)"},
      {"tp_backward_overlap", 0, "tp collectives not overlapped (v2.x)"},
      {"tp_comm_overlap", 0, "no tp communication overlap (v2.x)"},
      {"max_zero", 0, kMegatronZero},
      {"max_cp", 1, kMegatronNoCp},
      {"cp_allgather", 0, kMegatronNoCp},
      {"paper_memory", 1, kKorthikantiMemory},
      {"flash_attention", 0, kMegatronSoftmax},
      {"attention_fwd_of_peak", 0, kNoFusedAttention},
      {"attention_bwd_of_peak", 0, kNoFusedAttention},
      {"param_gather_overlap", 0, kNoZero3},
      {"param_gather_bytes", 2, "no ZeRO: nothing gathered (16-bit model weights)"},
      {"zero3_prefetch", 1, kNoZero3},
      {"a2a_overlap_parts", 1, kNoMoe},
      {"fb_a2a_overlap", 0, kNoMoe},
      {"fp8_gemms", 0, kNoFp8},
      {"fp8_activation_cache", 0, kNoFp8},
      {"norm_up_proj_recompute", 0, kMegatronRecompute},
      {"up_proj_recompute", 0, kMegatronRecompute},
      {"dense_mlp_recompute", 0, kMegatronRecompute},
      {"a2a_max_nodes", 0, kNoNodeLimit},
      {"comm_sms", 0, kNoCommSms},
      {"collective_sms", 0, kMegatronStep},
      {"tp_overlap_sms", 0, "no tp overlap in the 2021 code"}},
     kMegatronNoDualPipe},
    {"megatron-lm-2022",
     {"1f1b", "interleaved"},
     {{"dp_overlap", 0, kMegatronStep},
      {"grad_reduce_bytes", 4,
       "fp32 gradient buffer (bf16 forces "
       "--accumulate-allreduce-grads-in-fp32)"},
      {"optimizer_bytes", 50,
       "Float16OptimizerWithFloat16Params + apex FusedAdam with fp32 "
       "main grads: zero (4), unscale + inf check (8), norm (4), Adam "
       "(28), main -> bf16 params (6)"},
      {"optimizer_kernels", 2, "the optimizer's passes fused as in the 32-byte model"},
      {"grad_buffer_bytes", 8, kMegatronGradScale},
      {"grad_sync_placement", 1, kMegatronStageSync},
      {"grad_sync_pass_bytes", 8,
       "the fp32 buffer's 1/dp scaling (grad_buffer_bytes): in "
       "allreduce_gradients, on each stage before its all-reduce"},
      {"world_all_reduces", 2, kMegatronSmall},
      {"zero3_overlap", 1, kNoZero3},
      {"tied_embedding_reduce", 1, kMegatronTied},
      {"dropout", 1, kMegatronDropout},
      {"fp32_cross_entropy", 1, kMegatronLoss},
      {"p2p_blocking", 1, kMegatronP2p},
      {"p2p_scatter_gather", 1, kMegatronScatter},
      {"even_chunks", 1, kMegatronChunks},
      {"grad_accum_pass", 0,
       "--gradient-accumulation-fusion: the weight-gradient GEMM "
       "accumulates into the fp32 main_grad"},
      {"tp_backward_overlap", 1,
       "tensor_parallel/layers.py "
       "LinearWithGradAccumulationAndAsyncCommunication: the "
       "column-parallel backward's all-gather under the input-gradient "
       "GEMM, its reduce-scatter / all-reduce under the weight-gradient "
       "GEMM"},
      {"tp_comm_overlap", 0,
       "the forward's collectives exposed: only the column-parallel backward's are overlapped "
       "(tp_backward_overlap)"},
      {"max_zero", 0, kMegatronZero},
      {"max_cp", 1, kMegatronNoCp},
      {"cp_allgather", 0, kMegatronNoCp},
      {"paper_memory", 1, kKorthikantiMemory},
      {"flash_attention", 0, kMegatronSoftmax},
      {"attention_fwd_of_peak", 0, kNoFusedAttention},
      {"attention_bwd_of_peak", 0, kNoFusedAttention},
      {"param_gather_overlap", 0, kNoZero3},
      {"param_gather_bytes", 2, "no ZeRO: nothing gathered (16-bit model weights)"},
      {"zero3_prefetch", 1, kNoZero3},
      {"a2a_overlap_parts", 1, kNoMoe},
      {"fb_a2a_overlap", 0, kNoMoe},
      {"fp8_gemms", 0, kNoFp8},
      {"fp8_activation_cache", 0, kNoFp8},
      {"norm_up_proj_recompute", 0, kMegatronRecompute},
      {"up_proj_recompute", 0, kMegatronRecompute},
      {"dense_mlp_recompute", 0, kMegatronRecompute},
      {"a2a_max_nodes", 0, kNoNodeLimit},
      {"comm_sms", 0, kNoCommSms},
      {"collective_sms", 0, kMegatronStep},
      {"tp_overlap_sms", 24,
       "the async tp collectives are NCCL's (torch.distributed on their own stream), one CTA per "
       "channel on an SM of its own (NVIDIA/nccl #689); NCCL builds 24 ring channels within an "
       "8-GPU A100 NVSwitch node (nccl-tests #100, 2021-12: 8 A100-SXM-80GB, \"Channel 23/24\" "
       "over all 8 ranks; nccl #578, 2021-10: 24 for 4 ranks of an A100 NVSwitch node; nccl "
       "#652: 24 the channels the intra-node bandwidth needs)"}},
     kMegatronNoDualPipe},
    llama3_2024(),
    deepseek_v3_2024(),
    megatron_bridge_2025(),
    megascale_2024(),
    megatron_core_2024(),
    {kLocalSoftware,
     {},
     {{"dp_overlap", 0,
       "the local backend's collectives run on the ranks' own cores: nothing "
       "overlaps compute"},
      {"grad_reduce_bytes", 4, "fp32 gradients"},
      {"optimizer_bytes", 52,
       "AdamW (28) and the gradient-norm read (4) as on GPUs, plus the "
       "finiteness check of the updated parameters and moments (12 "
       "read) and the gradients read for the norm and zeroed (8)"},
      {"optimizer_kernels", 4, "AdamW, the norm, the finiteness check, the zeroing"},
      {"grad_buffer_bytes", 0, "the zeroing is in optimizer_bytes (no ZeRO shard apart)"},
      {"grad_sync_placement", 0, "the local model's placement (after the pipeline)"},
      {"grad_sync_pass_bytes", 0, "no pass of its own (grad_buffer_bytes 0)"},
      {"world_all_reduces", 3,
       "gradient norm, loss, and the ranks' agreement that the update "
       "left every weight finite"},
      {"zero3_overlap", 0, "gathers run on the ranks' own cores: nothing overlaps"},
      {"tied_embedding_reduce", 0,
       "not costed: the first and last stage exchange V/tp x h "
       "floats through shared memory"},
      {"dropout", 0, "no dropout"},
      {"fp32_cross_entropy", 0, "fp32 throughout (its pointwise passes calibrated)"},
      {"p2p_blocking", 0, "asynchronous sends"},
      {"p2p_scatter_gather", 0, "the whole boundary in one send"},
      {"even_chunks", 0, "any partition of the chunks"},
      {"grad_accum_pass", 0, "the weight-gradient GEMM accumulates"},
      {"tp_backward_overlap", 0, "collectives on the ranks' own cores"},
      {"tp_comm_overlap", 0, "collectives on the ranks' own cores"},
      {"max_zero", 3, "ZeRO 1-3"},
      {"max_cp", 1 << 20, "the engine's --cp (llama block, docs/context_parallel.md)"},
      {"cp_allgather", 0, "the engine's default --cp-comm ring"},
      {"paper_memory", 0, "the engine's estimate, matched to its memory records"},
      {"flash_attention", 0, "the engine's attention kernel, as calibrated"},
      {"attention_fwd_of_peak", 0, "the engine's attention kernel at its calibrated rate"},
      {"attention_bwd_of_peak", 0, "the engine's attention kernel at its calibrated rate"},
      {"param_gather_overlap", 0, "collectives on the ranks' own cores"},
      {"param_gather_bytes", 4, "the engine gathers its fp32 parameters (data_parallel.cpp)"},
      {"zero3_prefetch", 1, "two gather buffers (param_gathers.cpp)"},
      {"a2a_overlap_parts", 1, "the expert all-to-alls exposed, as the engine runs them"},
      {"fb_a2a_overlap", 0, "DualPipe-V's F&B halves one after the other"},
      {"fp8_gemms", 0, "no FP8 on the CPU engine"},
      {"fp8_activation_cache", 0, "no FP8 on the CPU engine"},
      {"norm_up_proj_recompute", 0, "--recompute none, selective or full only"},
      {"up_proj_recompute", 0, "--recompute none, selective or full only"},
      {"dense_mlp_recompute", 0, "--recompute none, selective or full only"},
      {"a2a_max_nodes", 0, kNoNodeLimit},
      {"comm_sms", 0, kNoCommSms},
      {"collective_sms", 0, "collectives on the ranks' own cores"},
      {"tp_overlap_sms", 0, "collectives on the ranks' own cores"}},
     "offered: the engine's own DualPipe-V (--schedule dualpipev, "
     "schedule/schedule_dualpipev.cpp)"}};

UsageError unknown_software(const std::string& name) {
  std::string known;
  for (const std::string& n : software_names()) known += (known.empty() ? "" : ", ") + n;
  return UsageError(str("unknown --software '", name, "' (known: ", known, ")"));
}

std::string number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

const std::vector<SoftwareTable>& software_tables() {
  return kTables;
}

const SoftwareTable& software_table(const std::string& name) {
  for (const SoftwareTable& t : kTables)
    if (name == t.name) return t;
  throw unknown_software(name);
}

// The tables' own names, in their order, without the local engine's (not a --software).
const std::vector<std::string>& software_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const SoftwareTable& t : kTables)
      if (std::string(t.name) != kLocalSoftware) out.push_back(t.name);
    return out;
  }();
  return names;
}

void apply_software(HardwareProfile& h, const std::string& name) {
  MT_REQUIRE(!h.local || name == kLocalSoftware,
             "--software applies to GPU hardware (the local profile is meshtrain's own engine, "
             "as calibrated)");
  if (!h.local && name == kLocalSoftware) throw unknown_software(name);
  const SoftwareTable& t = software_table(name);
  h.software = t.name;
  h.schedules = t.schedules;
  for (const SoftwareSetting& s : t.settings) set_profile_field(h, s.key, s.value);
}

std::vector<std::string> software_lines(const HardwareProfile& h) {
  const SoftwareTable& t = software_table(h.software);
  std::vector<std::string> out;
  for (const SoftwareSetting& s : t.settings) {
    const double v = profile_field_value(h, s.key);
    out.push_back(str(
        "software ", t.name, ": ", s.key, " ", number(v), " -- ", s.source,
        v != s.value ? str(" (set by the hardware file; ", t.name, " has ", number(s.value), ")")
                     : std::string()));
  }
  std::string schedules;
  for (const std::string& s : t.schedules) schedules += (schedules.empty() ? "" : ", ") + s;
  out.push_back(str("software ", t.name, ": schedules ",
                    schedules.empty() ? "1f1b, gpipe, zb-h1, interleaved, dualpipev" : schedules));
  out.push_back(str("software ", t.name, ": DualPipe-V ", t.dualpipev));
  return out;
}

void require_software_schedule(const HardwareProfile& h, const std::string& schedule) {
  if (h.local || h.schedules.empty() ||
      std::find(h.schedules.begin(), h.schedules.end(), schedule) != h.schedules.end())
    return;
  std::string known;
  for (const std::string& s : h.schedules) known += (known.empty() ? "" : ", ") + s;
  const std::string why =
      schedule == "dualpipev" ? str(": DualPipe-V ", software_table(h.software).dualpipev) : "";
  throw UsageError(
      str("--schedule ", schedule, ": software ", h.software, " has the schedules ", known, why));
}

}  // namespace mt::plan
