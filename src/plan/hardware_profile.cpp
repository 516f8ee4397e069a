#include "plan/hardware_profile.h"

#include "core/error.h"

namespace mt::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

void software_meshtrain(HardwareProfile& h);

// The datasheet figures and measured efficiencies below are documented, with their
// sources, in docs/planner.md ("Hardware constants"). None of them was fitted to an
// end-to-end training throughput.
HardwareProfile a100() {
  HardwareProfile h;
  h.name = "a100-80gb";
  h.devices_per_node = 8;  // DGX A100: 8 GPUs on NVSwitch, 8 HDR NICs (one per GPU)
  h.memory_bytes = 80 * kGiB;
  h.peak_fp32 = 156e12;  // TF32 tensor core, dense (A100 datasheet)
  h.peak_bf16 = 312e12;  // BF16 tensor core, dense (A100 datasheet)
  h.gemm_efficiency = 0.80;
  h.gemm_half_dim = 128;
  h.sms = 108;                  // A100 SXM: 108 SMs (A100 datasheet / architecture whitepaper)
  h.memory_bw = 0.85 * 2039e9;  // HBM2e 2,039 GB/s (datasheet) x STREAM-like efficiency
  h.kernel_overhead_s = 4e-6;
  h.intra_busbw = 230e9;  // nccl-tests all_reduce busbw on one DGX A100 (NVLink 3, 600 GB/s bidir.)
  h.intra_latency_s = 8e-6;
  h.inter_busbw = 23e9;  // per GPU/NIC: HDR InfiniBand 200 Gb/s = 25 GB/s, ~92% achieved
  h.inter_latency_s = 15e-6;
  // nccl-tests sendrecv_perf on 8 A100 NVLink GPUs: 189 GB/s at 256 MiB, 195 GB/s at 1 GiB
  // (li-plus/playground cuda/nccl.md) of the 300 GB/s per direction.
  h.p2p_bw_intra = 195e9;
  h.p2p_bw_inter = 23e9;
  h.sources = {
      "peak: A100 datasheet, 312 TFLOP/s BF16 dense, 156 TF32 dense (fp32 = TF32 tensor cores)",
      "GEMM: 80% of peak for large GEMMs (cuBLAS), efficiency x d/(d+128) for smallest dim d",
      "GEMM waves: 256x128 output tiles, one per SM, 108 SMs (NVIDIA Matrix Multiplication "
      "Background guide, wave quantization; A100 datasheet): a partial last wave idles SMs",
      "HBM: 2,039 GB/s datasheet x 0.85 achievable (stream-type kernels)",
      "NVLink: all-reduce busbw 230 GB/s within a node (nccl-tests on DGX A100)",
      "InfiniBand: HDR 200 Gb/s per GPU, 23 GB/s achieved; a group spanning nodes gets "
      "min(NVLink busbw, members per node x 23 GB/s) (one NIC rail per GPU)",
      "latency per collective step: 8 us NVLink, 15 us InfiniBand (nccl-tests small sizes)",
      "p2p within a node: 195 GB/s (nccl-tests sendrecv_perf, 8 A100 NVLink, 1 GiB)"};
  software_meshtrain(h);
  return h;
}

HardwareProfile h100() {
  HardwareProfile h;
  h.name = "h100-80gb";
  h.devices_per_node = 8;  // DGX H100: 8 GPUs on NVSwitch, 8 NDR NICs
  h.memory_bytes = 80 * kGiB;
  h.peak_fp32 = 494.5e12;  // TF32 tensor core, dense (H100 SXM datasheet: 989 sparse / 2)
  h.peak_bf16 = 989e12;    // BF16 tensor core, dense (H100 SXM datasheet)
  h.gemm_efficiency = 0.75;
  h.gemm_half_dim = 192;
  h.sms = 132;                  // H100 SXM5: 132 SMs (H100 datasheet / architecture whitepaper)
  h.memory_bw = 0.85 * 3350e9;  // HBM3 3.35 TB/s (datasheet)
  h.kernel_overhead_s = 4e-6;
  h.intra_busbw = 370e9;  // nccl-tests all_reduce busbw on one DGX H100 (NVLink 4, 900 GB/s bidir.)
  h.intra_latency_s = 8e-6;
  h.inter_busbw = 45e9;  // per GPU/NIC: NDR InfiniBand 400 Gb/s = 50 GB/s, ~90% achieved
  h.inter_latency_s = 15e-6;
  h.p2p_bw_intra = 360e9;
  h.p2p_bw_inter = 45e9;
  h.sources = {
      "peak: H100 SXM datasheet, 989 TFLOP/s BF16 dense, 494.5 TF32 dense",
      "GEMM: 75% of peak for large GEMMs (cuBLAS), efficiency x d/(d+192) for smallest dim d",
      "GEMM waves: 256x128 output tiles, one per SM, 132 SMs (H100 SXM5)",
      "HBM: 3.35 TB/s datasheet x 0.85 achievable",
      "NVLink: all-reduce busbw 370 GB/s within a node (nccl-tests on DGX H100, no NVLS)",
      "InfiniBand: NDR 400 Gb/s per GPU, 45 GB/s achieved; spanning groups as for A100",
      "latency per collective step: 8 us NVLink, 15 us InfiniBand"};
  software_meshtrain(h);
  return h;
}

// Software behaviour. Each figure is read off the named software's own source or paper
// (docs/planner.md, "Software profiles"); none was fitted to a published throughput.
void software_meshtrain(HardwareProfile& h) {
  h.software = "meshtrain";
  h.dp_overlap = 1;
  h.grad_reduce_bytes = 4;
  h.dropout = false;
  h.fp32_cross_entropy = false;
  h.optimizer_bytes = 32;
  h.p2p_blocking = false;
  h.p2p_scatter_gather = false;
  h.even_chunks = false;
  h.grad_accum_pass = false;
  h.tp_backward_overlap = false;
  h.max_zero = 3;
  h.schedules.clear();
  h.software_sources = {
      "software meshtrain: fp32 gradients reduced in buckets as the last microbatch's "
      "backward produces them (overlapped); no dropout; cross-entropy at the activation "
      "precision; AdamW + gradient-norm pass stream 32 bytes per updated element; every "
      "schedule (1f1b, gpipe, zb-h1, interleaved)"};
}

// Megatron-LM's training step as of the papers' code. Shared by the 2021 and 2022 versions:
//  - train_step() calls forward_backward_func(), then allreduce_gradients() on the whole
//    contiguous gradient buffer, then the tied embedding's all-reduce between the first and
//    last stage, then optimizer.step(): no overlap of the dp reduction with backward
//    (overlap came with --overlap-grad-reduce, Megatron-Core 2023).
//  - GPT defaults --attention-dropout 0.1 --hidden-dropout 0.1: torch dropout on the
//    attention probabilities (after the fused scale-mask-softmax) and the fused
//    bias-dropout-add on both residual branches.
//  - the loss: output.float() then vocab_parallel_cross_entropy (max, subtract, exp, sum,
//    divide, in fp32) unless --fp16-lm-cross-entropy.
//  - Float16OptimizerWithFloat16Params.step(): zero the grad buffer (per step), copy to
//    fp32 main grads (fp16 buffers only: read 2 write 4), unscale + inf check (8), grad
//    norm (4), apex FusedAdam (read p g m v, write p m v: 28), main -> fp16 params (6):
//    50 bytes per element with fp32 gradient buffers, 54 with fp16 ones.
//  - schedules: 1F1B and the interleaved 1F1B (the 2021 paper's); no zero-bubble.
void software_megatron(HardwareProfile& h, bool fp16_grads, const std::string& name) {
  h.software = name;
  h.dp_overlap = 0;
  h.grad_reduce_bytes = fp16_grads ? 2 : 4;
  h.dropout = true;
  h.fp32_cross_entropy = true;
  h.optimizer_bytes = fp16_grads ? 54 : 50;
  h.p2p_blocking = true;
  h.p2p_scatter_gather = true;
  h.even_chunks = true;
  // 2022 (v3.0, with sequence parallelism): --gradient-accumulation-fusion accumulates
  // in the weight-gradient GEMM, and the column-parallel backward's collectives are
  // asynchronous (tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication).
  h.grad_accum_pass = fp16_grads;
  h.tp_backward_overlap = !fp16_grads;
  h.schedules = {"1f1b", "interleaved"};
  // The papers' runs use no ZeRO (Megatron's own optimizer keeps full fp32 state per dp
  // rank in these versions; the later distributed optimizer is not modelled).
  h.max_zero = 0;
  h.software_sources = {
      "software " + name +
          ": megatron/training.py train_step(): gradients all-reduced over "
          "dp after the whole pipeline (allreduce_gradients), then the tied embedding's grad "
          "all-reduced between first and last stage, then the optimizer: dp_overlap 0",
      std::string("gradient buffer ") +
          (fp16_grads ? "fp16 (--fp16 without "
                        "--accumulate-allreduce-grads-in-fp32, the default)"
                      : "fp32 (bf16 forces "
                        "--accumulate-allreduce-grads-in-fp32)") +
          ": " + (fp16_grads ? "2" : "4") + " bytes per reduced element",
      "dropout 0.1 on attention probabilities (torch dropout: read, write, 1-byte mask) and "
      "in the fused bias-dropout-add of both residual branches (arguments.py defaults)",
      "cross-entropy: logits cast to fp32, vocab_parallel_cross_entropy max/sub/exp/sum/div "
      "passes (38 bytes per logit forward, 14 backward)",
      std::string("optimizer: Float16OptimizerWithFloat16Params + apex FusedAdam, ") +
          (fp16_grads ? "54" : "50") +
          " bytes per element (zero grads, [fp16->fp32 grads], unscale, norm, Adam, copy)",
      "schedules: 1f1b and interleaved only (schedules.py of that version); interleaved "
      "needs layers divisible by pp x v and microbatches divisible by pp (its assertions); "
      "no ZeRO (max_zero 0)",
      fp16_grads
          ? "gradient accumulation: megatron/model/distributed.py param hook "
            "main_grad.add_(grad) per parameter per microbatch (read the 16-bit grad, read + "
            "write the buffer); tp collectives not overlapped"
          : "tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication: "
            "weight-gradient GEMM accumulates into the fp32 main_grad (gradient accumulation "
            "fusion, no extra pass); column-parallel backward: input all-gather under the "
            "input-gradient GEMM, its reduce-scatter / all-reduce under the weight-gradient "
            "GEMM",
      "pipeline p2p: p2p_communication.py _communicate(): batch_isend_irecv, wait, "
      "torch.cuda.synchronize() (blocking); --scatter-gather-tensors-in-pipeline (default on): "
      "1/tp of the tensor per rank, gather_split_1d_tensor over tp after"};
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"a100-80gb", "h100-80gb"};
  return names;
}

const std::vector<std::string>& software_names() {
  static const std::vector<std::string> names = {"meshtrain", "megatron-lm-2021",
                                                 "megatron-lm-2022"};
  return names;
}

void apply_software(HardwareProfile& h, const std::string& name) {
  if (name == "meshtrain") return software_meshtrain(h);
  // Narayanan et al. 2021 ran fp16 (Megatron-LM v2.x); Korthikanti et al. 2022 bf16.
  if (name == "megatron-lm-2021") return software_megatron(h, true, name);
  if (name == "megatron-lm-2022") return software_megatron(h, false, name);
  throw UsageError(str("unknown --software '", name,
                       "' (known: meshtrain, megatron-lm-2021, megatron-lm-2022)"));
}

HardwareProfile preset_profile(const std::string& name) {
  if (name == "a100-80gb") return a100();
  if (name == "h100-80gb") return h100();
  throw UsageError(str("unknown --hardware '", name,
                       "' (known: a100-80gb, h100-80gb, local; or --hardware-file FILE.toml)"));
}

HardwareProfile for_backend(const HardwareProfile& h, const std::string& backend) {
  MT_REQUIRE(backend == "local" || backend == "mpi", "--backend must be local or mpi (got '",
             backend, "')");
  if (!h.local || backend == "local") return h;
  MT_REQUIRE(h.mpi_busbw > 0 && h.mpi_p2p_bw > 0, "the local profile has no MPI figures (",
             "'meshtrain plan --calibrate' measures them where mpirun works)");
  HardwareProfile m = h;
  m.name = h.name + " (mpi)";
  m.intra_busbw = m.inter_busbw = h.mpi_busbw;
  m.intra_latency_s = m.inter_latency_s = h.mpi_latency_s;
  m.p2p_bw_intra = m.p2p_bw_inter = h.mpi_p2p_bw;
  return m;
}

double peak_flops(const HardwareProfile& h, const std::string& precision) {
  return precision == "bf16" ? h.peak_bf16 : h.peak_fp32;
}

bool has_local_bf16(const HardwareProfile& h) {
  return h.peak_bf16 > 0 && h.bf16_convert_s > 0 && h.attention_bf16_fwd_flops > 0 &&
         h.attention_bf16_bwd_flops > 0;
}

}  // namespace mt::plan
