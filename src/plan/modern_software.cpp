#include "plan/modern_software.h"

namespace mt::plan {

// Llama 3 405B's training stack as "The Llama 3 Herd of Models" (Meta, 2024) describes it,
// section 3.3.2 (parallelism and its "Numerical stability" paragraph; 3.3.1 the network): 4D
// parallelism TP, CP, PP, DP with DP as FSDP that shards optimizer state and gradients and does not
// reshard the parameters after forward, all-gather based CP, an interleaved pipeline schedule with
// a tunable microbatch count and asynchronous point-to-point, FP32 gradient accumulation and FP32
// reduce-scatter, BF16 elsewhere. What the paper does not state keeps this engine's GPU
// assumption and says so.
SoftwareTable llama3_2024() {
  return {
      "llama3-2024",
      {"1f1b", "interleaved"},
      {{"dp_overlap", 1, "FSDP: gradients reduce-scattered during backward (Llama 3, 3.3.2)"},
       {"grad_reduce_bytes", 4,
        "FP32 gradient accumulation and reduce-scatter (3.3.2, Numerical stability)"},
       {"optimizer_bytes", 32, "fused AdamW (28) and the gradient-norm read (4), not stated"},
       {"optimizer_kernels", 2, "AdamW and the norm (not stated)"},
       {"grad_buffer_bytes", 0, "not stated (FSDP reduces the gradients as produced)"},
       {"grad_sync_placement", 0, "FSDP reduces the gradients as produced (dp_overlap 1)"},
       {"grad_sync_pass_bytes", 0, "no buffer passes (grad_buffer_bytes 0)"},
       {"world_all_reduces", 2, "gradient norm and loss (not stated)"},
       {"zero3_overlap", 1, "FSDP prefetches the next gather"},
       {"tied_embedding_reduce", 0, "untied embedding and head (Llama 3)"},
       {"dropout", 0, "no dropout in Llama 3"},
       {"fp32_cross_entropy", 1,
        "the loss in fp32 (not stated; 3.3.2 keeps FP32 where numerics need it)"},
       {"p2p_blocking", 0, "asynchronous point-to-point between stages (3.3.2)"},
       {"p2p_scatter_gather", 0, "the boundary over one link (not stated)"},
       {"even_chunks", 0, "first and last stage one layer short (3.3.2): uneven chunks allowed"},
       {"grad_accum_pass", 1,
        "3.3.2 Numerical stability: \"FP32 gradient accumulation during backward computation "
        "over multiple micro-batches\" of BF16 weight gradients: a pass per microbatch (PyTorch "
        "FSDP2 adds each bf16 .grad into an fp32 unsharded_accumulated_grad, "
        "_fsdp_param.py accumulate_unsharded_grad_if_needed)"},
       {"tp_backward_overlap", 0, "not stated: tp collectives exposed"},
       {"tp_comm_overlap", 0, "not stated: tp collectives exposed"},
       {"max_zero", 2,
        "FSDP sharding optimizer state and gradients, parameters kept after forward"},
       {"max_cp", 1 << 20, "context parallelism (3.3.2)"},
       {"cp_allgather", 1, "all-gather based CP: K/V gathered, then local attention (3.3.2)"},
       {"paper_memory", 1, kKorthikantiMemory},
       {"flash_attention", 1, "fused attention (no s x s tensors), causal blocks skipped"},
       {"attention_fwd_of_peak", 0,
        "the kernel not stated (3.3): the GEMM model, on H100 at head width 128 about "
        "FlashAttention-2's published rate (its README's H100 figure, causal, 4K: 294 TFLOP/s)"},
       {"attention_bwd_of_peak", 0, "the kernel not stated (3.3): the GEMM model"},
       {"param_gather_overlap", 1, "FSDP's parameter all-gather prefetched under compute"},
       {"param_gather_bytes", 2,
        "BF16 parameters gathered (3.3.2 names FP32 for the gradients' accumulation and "
        "reduce-scatter only; the all-gather's dtype is not stated)"},
       {"zero3_prefetch", 1, "FSDP prefetches one layer ahead"},
       {"a2a_overlap_parts", 1, "no MoE in Llama 3"},
       {"fb_a2a_overlap", 0, "no MoE in Llama 3"},
       {"fp8_gemms", 0, "BF16 training (3.3.2, Table 4: BF16 MFU); FP8 appears only for inference"},
       {"fp8_activation_cache", 0, "BF16 training: 16-bit activations"},
       {"norm_up_proj_recompute", 0,
        "no activation checkpointing at 8K (3.3.2): norm outputs and Q, K, V kept"},
       {"up_proj_recompute", 0, "no activation checkpointing at 8K (3.3.2)"},
       {"dense_mlp_recompute", 0, "no activation checkpointing at 8K (3.3.2)"},
       {"a2a_max_nodes", 0, "no MoE in Llama 3"},
       {"comm_sms", 0, "no MoE in Llama 3"},
       {"collective_sms", 0,
        "NCCLX (3.3.4, Meta's NCCL fork): the SMs its collectives hold are not stated"},
       {"tp_overlap_sms", 0, "not stated: tp collectives exposed"}},
      "not offered: Llama 3's pipeline is an interleaved 1F1B schedule with a tunable "
      "microbatch count (3.3.2); DualPipe came later, with DeepSeek-V3 (Dec 2024)"};
}

// DeepSeek-V3's training stack as its technical report (DeepSeek-AI 2024, arXiv 2412.19437)
// describes it: a 16-way pipeline with DualPipe, 64-way expert parallelism over 8 nodes,
// ZeRO-1 data parallelism, no tensor parallelism, FP8 mixed precision. What the report does
// not state keeps this engine's GPU assumption and says so. Checked against the report's
// text (a copy of the arXiv v2 HTML in the search corpus, read at issue #30's second stop):
// §3.3.1 keeps "the embedding module, the output head, MoE gating modules, normalization
// operators, and attention operators" at BF16/FP32 and runs Fprop, Dgrad and Wgrad in FP8;
// §3.3.2 scales 1x128 activation tiles and 128x128 weight blocks online; §3.3.3 tracks
// AdamW's moments in BF16 while "the master weights ... and gradients (used for batch size
// accumulation) are still retained in FP32", caches activations in FP8 (E5M6 for the
// attention output projection's input) and recomputes the MoE SwiGLU from its cached
// input; §3.2.3 recomputes every RMSNorm and MLA up-projection and shares the embedding and
// output head of the MTP module with the main model on one pipeline rank.
SoftwareTable deepseek_v3_2024() {
  constexpr const char* kNotStated = "not stated in the report (this engine's assumption)";
  return {
      "deepseek-v3-2024",
      {"dualpipev"},
      {{"dp_overlap", 1, kNotStated},
       {"grad_reduce_bytes", 4,
        "gradients (used for batch size accumulation) retained in FP32 (3.3.3)"},
       {"optimizer_bytes", 26,
        "AdamW with BF16 moments and FP32 master weights (3.3.3): read param 4, grad 4, "
        "moments 2 + 2, write param and moments 8, the BF16 weight copy 2, the norm read 4"},
       {"optimizer_kernels", 2, kNotStated},
       {"grad_buffer_bytes", 0, kNotStated},
       {"grad_sync_placement", 0, kNotStated},
       {"grad_sync_pass_bytes", 0, kNotStated},
       {"world_all_reduces", 2, kNotStated},
       {"zero3_overlap", 1, "ZeRO-1 only"},
       {"tied_embedding_reduce", 0,
        "embedding and output head on the same pipeline rank (DualPipe, 3.2.3): no "
        "exchange"},
       {"dropout", 0, kNotStated},
       {"fp32_cross_entropy", 1, "output head at its original precision (3.3.1)"},
       {"p2p_blocking", 0, "pipeline sends hidden under the F&B pairs"},
       {"p2p_scatter_gather", 0, "no tensor parallelism"},
       {"even_chunks", 0, kNotStated},
       {"grad_accum_pass", 0, kNotStated},
       {"tp_backward_overlap", 0, "no tensor parallelism"},
       {"tp_comm_overlap", 0, "no tensor parallelism"},
       {"max_zero", 1, "ZeRO-1 data parallelism"},
       {"max_cp", 1, "no context parallelism in pre-training (4K sequences)"},
       {"cp_allgather", 0, "no context parallelism"},
       {"paper_memory", 1,
        "Korthikanti Table 2 accounting, with the FP8 activation cache and the recomputation "
        "of the two fields below (3.2.3, 3.3.3)"},
       {"flash_attention", 1,
        "fused attention (the kernel not stated; attention operators at BF16/FP32, 3.3.1); MLA "
        "with --attention mla (else planned as MHA of --heads x --head-dim)"},
       {"attention_fwd_of_peak", 0, "DeepSeek's attention kernel and its rate not stated"},
       {"attention_bwd_of_peak", 0, "DeepSeek's attention kernel and its rate not stated"},
       {"param_gather_overlap", 0, kNotStated},
       {"param_gather_bytes", 4, kNotStated},
       {"zero3_prefetch", 1, "ZeRO-1 only"},
       {"a2a_overlap_parts", 1, "outside the F&B pairs the all-to-alls are not split"},
       {"fb_a2a_overlap", 1,
        "DualPipe: a forward and a backward chunk paired, each one's all-to-all and "
        "pipeline sends under the other's compute; planned as DualPipe-V"},
       {"fp8_gemms", 1,
        "Fprop, Dgrad and Wgrad of the linear layers in FP8 with 1x128 / 128x128 online "
        "scaling (3.3.1, 3.3.2); embedding, head, gating, norms and attention at BF16/FP32"},
       {"fp8_activation_cache", 1,
        "3.3.3 Low-Precision Activation: activations cached in FP8 for the backward of the "
        "Linear operator (1 byte and a scale per 1x128 tile, 3.3.2); the attention output "
        "projection's input in E5M6 (counted as 16 bits: its container is not stated); the MoE "
        "SwiGLU's inputs cached in FP8 and its output recomputed in backward"},
       {"norm_up_proj_recompute", 1,
        "3.2.3: \"We recompute all RMSNorm operations and MLA up-projections during "
        "back-propagation\": Q, K, V and the norms' outputs not kept, the latents (the "
        "down-projections' outputs, --attention mla) kept instead; under MHA the q/k/v GEMM's "
        "input, h wide"},
       {"up_proj_recompute", 0, "3.2.3: with the norms, norm_up_proj_recompute (which implies it)"},
       {"dense_mlp_recompute", 0,
        "3.2.3 names the RMSNorms and MLA up-projections only (the MoE SwiGLU: "
        "fp8_activation_cache)"},
       {"a2a_max_nodes", 4,
        "3.2.2: \"each token will be sent to at most 4 nodes\", once per node over IB to "
        "the GPU of the same in-node index, then forwarded over NVLink; the dispatch in FP8 "
        "(3.3.3, Low-Precision Communication), the combine in BF16"},
       {"comm_sms", 20,
        "3.2.2: \"only 20 SMs are sufficient to fully utilize the bandwidths of IB and "
        "NVLink\" (of the H800's 132), held while the all-to-alls run under computation"},
       {"collective_sms", 0,
        "not stated: the report gives the all-to-alls' SMs, not the ZeRO-1 collectives'"},
       {"tp_overlap_sms", 0, "no tensor parallelism"}},
      "offered: DeepSeek-V3 pipelines with DualPipe, planned as its V variant (one copy of "
      "the parameters per rank)"};
}

// Megatron-Core under Megatron-Bridge's DGX-H100 performance recipes (NeMo 25.09 container:
// Megatron-Bridge docs/performance-summary-archive.md), as its DeepSeek-V3 H100 FP8 recipe
// sets it (scripts/performance/configs/deepseek/deepseek_llm_pretrain.py and
// deepseek_workload_base_configs.py, as stored in the search corpus). What the recipe does
// not set is Megatron-Core's default where read, else this engine's assumption, and says so.
SoftwareTable megatron_bridge_2025() {
  constexpr const char* kDefault = "not set by the recipe (this engine's assumption)";
  return {
      "megatron-bridge-2025",
      {"1f1b", "interleaved"},
      {{"dp_overlap", 0, "cfg.comm_overlap.overlap_grad_reduce = False (H100 recipes)"},
       {"grad_reduce_bytes", 2, "cfg.ddp.grad_reduce_in_fp32 = False: bf16 gradient reduction"},
       {"optimizer_bytes", 50,
        "mixed-precision Adam with fp32 main grads and params, as megatron-lm-2022 (not "
        "re-read for Megatron-Core)"},
       {"optimizer_kernels", 2, kDefault},
       {"grad_buffer_bytes", 0, "not re-read for Megatron-Core 2025 (this engine's assumption)"},
       {"grad_sync_placement", 0, "not re-read for Megatron-Core 2025 (this engine's assumption)"},
       {"grad_sync_pass_bytes", 0, "no buffer passes (grad_buffer_bytes 0)"},
       {"world_all_reduces", 2, "gradient-norm and loss all-reduces"},
       {"zero3_overlap", 1, "no ZeRO 3 (max_zero 1)"},
       {"tied_embedding_reduce", 0, "untied embedding and output layer (Llama 3, DeepSeek-V3)"},
       {"dropout", 0, "no dropout in the Llama 3 / DeepSeek-V3 model configs (not re-read)"},
       {"fp32_cross_entropy", 1, "Megatron-Core's vocab-parallel cross-entropy in fp32"},
       {"p2p_blocking", 0, kDefault},
       {"p2p_scatter_gather", 0, kDefault},
       {"even_chunks", 0, "pp_layout places layers unevenly (\"Et|(tt|)*30mL\")"},
       {"grad_accum_pass", 0, "gradient-accumulation fusion into the fp32 main_grad"},
       {"tp_backward_overlap", 0, "no tp communication overlap set by the H100 recipe"},
       {"tp_comm_overlap", 0, "tp_comm_overlap not set by the H100 recipe"},
       {"max_zero", 1, "the distributed optimizer shards optimizer state (ZeRO-1)"},
       {"max_cp", 1 << 20, "Megatron-Core context parallelism"},
       {"cp_allgather", 0, "Megatron-Core's default cp_comm_type p2p (a ring)"},
       {"paper_memory", 1, kKorthikantiMemory},
       {"flash_attention", 1,
        "Transformer Engine's fused attention; DeepSeek-V3's MLA with --attention mla (else "
        "planned as MHA of --heads x --head-dim)"},
       {"attention_fwd_of_peak", 0,
        "Transformer Engine prefers cuDNN's fused attention on Hopper, but no published cuDNN "
        "rate at MLA's head widths (q/k 192, v 128) was found: the GEMM model"},
       {"attention_bwd_of_peak", 0, "as attention_fwd_of_peak: the GEMM model"},
       {"param_gather_overlap", 0, "overlap_param_gather not set by the recipe"},
       {"param_gather_bytes", 2,
        "Megatron-Core's distributed optimizer gathers the bf16 model parameters' buffer"},
       {"zero3_prefetch", 1, "no ZeRO 3"},
       {"a2a_overlap_parts", 1, "moe_a2a_overlap = False (DEEPSEEK_V3_PRETRAIN_CONFIG_H100_V1)"},
       {"fb_a2a_overlap", 0, "no DualPipe (1f1b / interleaved only)"},
       {"fp8_gemms", 1,
        "FP8-CS: Transformer Engine FP8 GEMMs with current (per-tensor) scaling; the table's "
        "DGX-H100 rows are FP8 (25.11: FP8-CS)"},
       {"fp8_activation_cache", 0,
        "not modelled: Transformer Engine's saved FP8 inputs are not described here"},
       {"norm_up_proj_recompute", 0,
        "recompute_modules [\"mla_up_proj\", \"mlp\"] (DEEPSEEK_V3 H100 recipe): no norm "
        "recomputation"},
       {"up_proj_recompute", 1,
        "recompute_modules \"mla_up_proj\": Megatron-Core recomputes the MLA up projection "
        "and RoPE (output-discarding checkpoint), Q, K, V not kept"},
       {"dense_mlp_recompute", 1,
        "recompute_modules \"mlp\": Megatron-Core recomputes the dense MLP submodule (the "
        "first 3 dense layers; not the MoE layers)"},
       {"a2a_max_nodes", 0,
        "the recipe's dispatcher is not read here: every routed row priced as its own "
        "all-to-all message (this engine's assumption)"},
       {"comm_sms", 0, "moe_a2a_overlap = False: the all-to-alls do not run beside computation"},
       {"collective_sms", 0,
        "overlap_grad_reduce False, overlap_param_gather not set: no dp collective beside "
        "computation"},
       {"tp_overlap_sms", 0, "no tp communication overlap set by the H100 recipe"}},
      kMegatronNoDualPipe};
}

// MegaScale's training stack as its paper describes it (Jiang et al., "MegaScale: Scaling Large
// Language Model Training to More Than 10,000 GPUs", NSDI 2024, arXiv 2402.15627; read in a
// text copy of the paper in the code corpus, issue #30's stop 41): Megatron-LM (commit
// 285068c8, 6.1) with ZeRO-2 data parallelism (2, Figure 1), tp within a node, sequence
// parallelism, the interleaved 1F1B schedule (2, 6.1), and the 3.2 overlaps of dp, pp and tp
// communication; FlashAttention-2 (3.3). Not modelled (docs/planner.md says so): the parallel
// transformer block and sliding-window attention (3.1; the paper states no window size), the
// forward half of the tp overlap (3.2, Figure 3c; tp_backward_overlap covers the backward
// only) and the data-pipeline and network tuning (3.4-3.6). What the paper does not state keeps
// Megatron-LM's default as megatron-lm-2022 describes it, and says so.
SoftwareTable megascale_2024() {
  constexpr const char* kMegatron = "not stated: Megatron-LM's default (as megatron-lm-2022)";
  constexpr const char* kNoMoeHere = "no MoE in MegaScale's 175B / 530B runs";
  return {"megascale-2024",
          {"1f1b", "interleaved"},
          {{"dp_overlap", 1,
            "3.2 Overlapping in data parallelism: a model chunk's reduce-scatter starts after its "
            "backward pass"},
           {"grad_reduce_bytes", 4, kMegatron},
           {"optimizer_bytes", 50,
            "3.1 LAMB: its trust-ratio norms are not modelled; the Adam-style passes as "
            "megatron-lm-2022"},
           {"optimizer_kernels", 2, kMegatron},
           {"grad_buffer_bytes", 0,
            "not stated; MegaScale's Megatron-LM (285068c8) not re-read (this engine's "
            "assumption)"},
           {"grad_sync_placement", 0, "not stated (as grad_buffer_bytes)"},
           {"grad_sync_pass_bytes", 0, "no buffer passes (grad_buffer_bytes 0)"},
           {"world_all_reduces", 2, kMegatron},
           {"zero3_overlap", 1, "no ZeRO 3 (max_zero 2)"},
           {"tied_embedding_reduce", 1, kMegatron},
           {"dropout", 1, kMegatron},
           {"fp32_cross_entropy", 1, kMegatron},
           {"p2p_blocking", 0,
            "3.2 Overlapping in pipeline parallelism: send and receive decoupled, the send "
            "overlapped with computation (Figure 4)"},
           {"p2p_scatter_gather", 1, kMegatron},
           {"even_chunks", 1, "Megatron-LM's interleaved schedule (6.1): equal chunks"},
           {"grad_accum_pass", 0, kMegatron},
           {"tp_backward_overlap", 1,
            "3.2 Overlapping in tensor/sequence parallelism: all-gather fused into the "
            "column-parallel linear, reduce-scatter into the row-parallel one, the GEMM chunked "
            "and pipelined with the communication (Figure 3c); the forward half not modelled"},
           {"tp_comm_overlap", 0,
            "3.2, Figure 3c fuses the forward's collectives into the linears too; not modelled for "
            "this profile (its rows were checked without it)"},
           {"max_zero", 2, "2, Figure 1: data parallelism with ZeRO-2"},
           {"max_cp", 1, "no context parallelism stated"},
           {"cp_allgather", 0, "no context parallelism stated"},
           {"paper_memory", 1, kKorthikantiMemory},
           {"flash_attention", 1, "3.3 Efficient operators: FlashAttention-2"},
           {"attention_fwd_of_peak", 155.0 / 312,
            "FlashAttention-2 on A100 SXM4 (flash-attention README, "
            "assets/flash2_a100_fwd_bwd_benchmark.png, 2023-07-17): causal, head width 128, "
            "2K: 155 TFLOP/s forward + backward (one figure for both passes)"},
           {"attention_bwd_of_peak", 155.0 / 312, "the same figure (forward + backward)"},
           {"param_gather_overlap", 1,
            "3.2: each chunk's all-gather triggered before its forward, the first prefetched at "
            "the start of the iteration under data loading"},
           {"param_gather_bytes", 2,
            "Megatron-LM's distributed optimizer gathers the 16-bit model parameters (not "
            "stated)"},
           {"zero3_prefetch", 1, "no ZeRO 3"},
           {"a2a_overlap_parts", 1, kNoMoeHere},
           {"fb_a2a_overlap", 0, kNoMoeHere},
           {"fp8_gemms", 0, "NVIDIA Ampere GPUs (6): no FP8 tensor cores"},
           {"fp8_activation_cache", 0, "Ampere: 16-bit activations"},
           {"norm_up_proj_recompute", 0, kMegatron},
           {"up_proj_recompute", 0, kMegatron},
           {"dense_mlp_recompute", 0, kMegatron},
           {"a2a_max_nodes", 0, kNoMoeHere},
           {"comm_sms", 0, kNoMoeHere},
           {"collective_sms", 16,
            "3.6 Network performance tuning: \"eight 200G NICs on the server\", one per GPU (8 "
            "Ampere GPUs, 6): NCCL's case of NVIDIA/nccl #689 (2022), \"on DGX with 8 NICs and a "
            "top speed of 190 GB/s ... it would use 16 SMs\", one CTA per channel, not shared "
            "with compute kernels; the paper names no other collective library"},
           {"tp_overlap_sms", 0,
            "not stated: the SMs of the paper's fused tp communication are not given"}},
          kMegatronNoDualPipe};
}

}  // namespace mt::plan
