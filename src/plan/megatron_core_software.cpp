// --software megatron-core-2024: Megatron-Core r0.8.0 as the Megatron-LM README's H100 weak-scaling
// table ran it (the older published table's MC24 rows), each value cited by code line.
#include "plan/modern_software.h"

namespace mt::plan {

// Megatron-Core r0.8.0's attention kernel and parameter gather (issue #30, stop 44).
constexpr const char* kMcoreCudnnForward =
    "cuDNN's fused attention: Transformer Engine v1.7 (attention.py) drops flash-attn for "
    "FusedAttention's F16_arbitrary_seqlen backend on sm90; NVIDIA cudnn-frontend "
    "benchmark/benchmark_results.csv (commit b740542, 2024-05-07, cuDNN 9.1.0, BF16, causal, "
    "4 x 16 heads x 4096 x 128, no dropout): 542.3 TFLOP/s forward (the FlashAttention-3 "
    "paper's H100 SXM5 figure, same shape: 518)";
// The DDP wrapper's passes over each rank's whole fp32 grad buffer (not the optimizer's
// 1/dp shard), on the compute stream, read at f2e5db402c.
constexpr const char* kMcoreGradBuffer =
    "core/distributed at f2e5db402c: zero_grad_buffer() zeroes the whole fp32 buffer each "
    "step (write 4); each bucket's start_grad_sync() first takes grad_data.norm() for "
    "check_for_nan_in_grad (read 4; on by default, arguments.py, and the runs' scripts are "
    "not published) and scales grad_data *= 1/dp (gradient_scaling_factor, dp > 1; read + "
    "write 8)";
constexpr const char* kMcoreParamGather =
    "--overlap-param-gather (README): zero_grad() dispatches the first bucket's all-gather and "
    "each forward pre-hook waits on its bucket and only then dispatches the next "
    "(core/optimizer/distrib_optimizer.py at f2e5db402c, _finish_param_sync_helper): the "
    "gathers run one after another under the first microbatch's forward";
constexpr const char* kMcoreParamBytes =
    "_dispatch_gather_model_params all-gathers the model parameters' buffer (pbuf), bf16 under "
    "--bf16; the fp32 main parameters stay sharded";

// Megatron-Core r0.8.0's communication kernels beside its GEMMs (issue #30, stop 45).
constexpr const char* kMcoreNcclSms =
    "NCCL on DGX H100 nodes (8 NICs): one CTA per channel and \"NCCL CTAs won't share an SM "
    "with compute kernels\"; \"on DGX with 8 NICs ... it would use 16 SMs\" (NCCL's "
    "maintainer about DGX A100, NVIDIA/nccl #689, 2022: the same 8-NIC node shape); the H100 "
    "figure itself rests on an H100 cluster's NCCL log (NVIDIA/nccl #1453, 3 nodes x 8 GPUs): "
    "16 ring channels";
constexpr const char* kMcoreUserbufferSms =
    "Transformer Engine v1.7 initialize_ub (pytorch/module/base.py; Megatron-LM passes ub_cfgs "
    "{} without --tp-comm-overlap-cfg, training/initialize.py): the bulk (qkv/fc1 dgrad, "
    "wgrad) and pipeline (proj/fc2 fprop) overlaps are UbufCommOverlap "
    "(csrc/comm_gemm_overlap.h) with num_sm 16, use_ce 0, set_sm_margin 0: their userbuffers "
    "kernels take 16 SMs beside the GEMM; ring_exchange copies with the copy engines (use_ce 1)";

// Megatron-Core r0.8.0's gradient sync with pp (issue #30, stop 47).
constexpr const char* kMcoreDelayedSync =
    "--delay-grad-reduce on by default (arguments.py: --no-delay-grad-reduce turns it off; "
    "training.py sets grad_sync_func): schedules.py's interleaved schedule starts chunk c's "
    "sync on stage r after its backward r microbatches past c's last, the rest after the "
    "cooldown; 1F1B syncs the first stage from its last backward's hooks and the others "
    "after their cooldown (\"during pipeline bubble\"); finalize_model_grads waits for them, "
    "and the optimizer's gradient norm is all-reduced over the model-parallel group "
    "(clip_grads.py), so the step waits for every stage's";

// Megatron-Core r0.8.0 as Megatron-LM's README ran its H100 weak-scaling table (commit
// f2e5db402c, 2024-07-15, "New scaling figures on H100 GPUs"; images/model_table.png): GPT
// models with a 131,072 vocabulary at sequence 4,096, BF16 (MFU against the BF16 peak; FP8
// is not mentioned), "--overlap-grad-reduce --overlap-param-gather" (distributed optimizer),
// "--tp-comm-overlap" (Transformer Engine userbuffers, which needs SP) and the pipeline's
// p2p overlap "enabled by default". Fields read from Megatron-LM's code at that commit
// (megatron/training/arguments.py, megatron/core/...); what the README does not state keeps
// Megatron-LM's default there. Micro-batch, schedule and recomputation are not published:
// the planner searches them.
// What runs with each bucket's reduce-scatter (issue #30, stop 47).
constexpr const char* kMcoreSyncPasses =
    "of grad_buffer_bytes, the NaN check's norm (4) and the 1/dp scaling (8): start_grad_sync "
    "(core/distributed/param_and_grad_buffer.py) runs them per bucket as it starts the bucket's "
    "reduce-scatter; the zeroing (4) at the step's start";

SoftwareTable megatron_core_2024() {
  return {"megatron-core-2024",
          {"1f1b", "interleaved"},
          {{"dp_overlap", 1,
            "--overlap-grad-reduce (README): each bucket reduce-scattered when the last "
            "microbatch's backward has produced it (core/distributed/distributed_data_parallel.py, "
            "schedules.py grad_sync_func)"},
           {"grad_reduce_bytes", 4,
            "arguments.py: bf16 sets accumulate_allreduce_grads_in_fp32 (fp32 reduce-scatter)"},
           {"optimizer_bytes", 38,
            "distributed optimizer, fp32 main params and grads, fused Adam over the shard: norm "
            "(4), Adam (28), main -> bf16 params (6); bf16 has no grad scaler, so no unscale / "
            "inf-check pass (core/optimizer/__init__.py, optimizer.py); the grad buffer's "
            "zeroing is the whole buffer's (grad_buffer_bytes)"},
           {"optimizer_kernels", 2, "the optimizer's passes fused as in the 32-byte model"},
           {"grad_buffer_bytes", 16, kMcoreGradBuffer},
           {"grad_sync_placement", 2, kMcoreDelayedSync},
           {"grad_sync_pass_bytes", 12, kMcoreSyncPasses},
           {"world_all_reduces", 2, "gradient-norm and loss all-reduces over the world"},
           {"zero3_overlap", 1, "no ZeRO 3 (max_zero 1)"},
           {"tied_embedding_reduce", 0,
            "the table's parameter counts are those of an untied output layer "
            "(--untie-embeddings-and-output-weights; 7.1B = 12 l h^2 + 2 V h): no exchange"},
           {"dropout", 1,
            "arguments.py defaults --attention-dropout 0.1 --hidden-dropout 0.1 (the runs' "
            "scripts not published): the residual branches' masks; the attention's inside the "
            "fused kernel"},
           {"fp32_cross_entropy", 1,
            "core/tensor_parallel/cross_entropy.py casts the logits .float(); "
            "--cross-entropy-loss-fusion off by default"},
           {"p2p_blocking", 0,
            "interleaved: overlap_p2p_comm on by default (README: PP overlap \"enabled by "
            "default\"); 1F1B batches and waits (arguments.py turns the overlap off), a transfer "
            "under 1 ms at these shapes"},
           {"p2p_scatter_gather", 0,
            "under SP (required by --tp-comm-overlap) the boundary is already split over tp"},
           {"even_chunks", 1,
            "arguments.py asserts layers divisible by pp and per-stage layers by the virtual "
            "stage's"},
           {"grad_accum_pass", 0,
            "--gradient-accumulation-fusion on by default: wgrad accumulates into main_grad"},
           {"tp_backward_overlap", 1,
            "tp_comm_bulk_dgrad / tp_comm_bulk_wgrad (core/model_parallel_config.py, on under "
            "--tp-comm-overlap): the input's all-gather under the dgrad GEMM, the dgrad's "
            "reduce-scatter under the wgrad GEMM"},
           {"tp_comm_overlap", 1,
            "--tp-comm-overlap (README): tp_comm_overlap_ag / _rs (model_parallel_config.py) and "
            "Transformer Engine's userbuffer methods (initialize_ub: ring_exchange for qkv/fc1 "
            "fprop and proj/fc2 dgrad, pipeline for proj/fc2 fprop)"},
           {"max_zero", 1,
            "--use-distributed-optimizer (--overlap-param-gather requires it, arguments.py): "
            "optimizer state and main params sharded over dp"},
           {"max_cp", 1 << 20, "Megatron-Core context parallelism (the table's runs: cp 1)"},
           {"cp_allgather", 0, "Megatron-Core's cp_comm_type p2p (a ring)"},
           {"paper_memory", 1, kKorthikantiMemory},
           {"flash_attention", 1,
            "--transformer-impl transformer_engine (arguments.py default): TE's fused attention"},
           {"attention_fwd_of_peak", 542.3 / 989, kMcoreCudnnForward},
           {"attention_bwd_of_peak", 443.6 / 989,
            "the same cudnn-frontend row: 443.6 TFLOP/s backward (2.5x the forward's count)"},
           {"param_gather_overlap", 1, kMcoreParamGather},
           {"param_gather_bytes", 2, kMcoreParamBytes},
           {"zero3_prefetch", 1, "no ZeRO 3"},
           {"a2a_overlap_parts", 1, "no MoE in the table"},
           {"fb_a2a_overlap", 0, "no MoE in the table"},
           {"fp8_gemms", 0,
            "BF16: the README names no FP8 and its MFU is against the BF16 peak (per-GPU "
            "teraFLOP/s / MFU = 989-999)"},
           {"fp8_activation_cache", 0, "BF16: 16-bit activations"},
           {"norm_up_proj_recompute", 0, "--recompute-granularity selective or full only"},
           {"up_proj_recompute", 0, "--recompute-granularity selective or full only"},
           {"dense_mlp_recompute", 0, "--recompute-granularity selective or full only"},
           {"a2a_max_nodes", 0, "no MoE in the table"},
           {"comm_sms", 0, "no MoE in the table"},
           {"collective_sms", 16, kMcoreNcclSms},
           {"tp_overlap_sms", 16, kMcoreUserbufferSms}},
          kMegatronNoDualPipe};
}

}  // namespace mt::plan
