#include "plan/hardware_profile.h"

#include "core/error.h"

namespace mt::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

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
  apply_software(h, "meshtrain");
  return h;
}

HardwareProfile h100() {
  HardwareProfile h;
  h.name = "h100-80gb";
  h.devices_per_node = 8;  // DGX H100: 8 GPUs on NVSwitch, 8 NDR NICs
  h.memory_bytes = 80 * kGiB;
  h.peak_fp32 = 494.5e12;  // TF32 tensor core, dense (H100 SXM datasheet: 989 sparse / 2)
  h.peak_bf16 = 989e12;    // BF16 tensor core, dense (H100 SXM datasheet)
  h.peak_fp8 = 1979e12;    // FP8 tensor core, dense (H100 SXM datasheet: 3,958 sparse / 2)
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
      "peak: H100 SXM datasheet, 989 TFLOP/s BF16 dense, 494.5 TF32 dense, 1979 FP8 dense",
      "GEMM: 75% of peak for large GEMMs (cuBLAS), efficiency x d/(d+192) for smallest dim d",
      "GEMM waves: 256x128 output tiles, one per SM, 132 SMs (H100 SXM5)",
      "HBM: 3.35 TB/s datasheet x 0.85 achievable",
      "NVLink: all-reduce busbw 370 GB/s within a node (nccl-tests on DGX H100, no NVLS)",
      "InfiniBand: NDR 400 Gb/s per GPU, 45 GB/s achieved; spanning groups as for A100",
      "latency per collective step: 8 us NVLink, 15 us InfiniBand"};
  apply_software(h, "meshtrain");
  return h;
}

// H800 SXM: the H100 SXM die and memory (the same tensor-core rates and HBM3) with NVLink cut
// to 400 GB/s bidirectional (200 GB/s each way, against H100's 450). DeepSeek-V3's technical
// report (2024, section 3.2.2) gives what its H800 cluster achieves: "NVLink offers a
// bandwidth of 160 GB/s, roughly 3.2 times that of IB (50 GB/s)", one 400 Gb/s InfiniBand
// NIC per GPU (section 3.1).
HardwareProfile h800() {
  HardwareProfile h = h100();
  h.name = "h800-80gb";
  h.intra_busbw = 160e9;  // DeepSeek-V3 report 3.2.2: NVLink 160 GB/s achieved
  h.p2p_bw_intra = 160e9;
  h.inter_busbw = 45e9;  // IB 50 GB/s (DeepSeek-V3 report 3.2.2) at ~90%, as NDR for H100
  h.p2p_bw_inter = 45e9;
  h.sources = {
      "peak: H800 SXM = H100 SXM compute (989 TFLOP/s BF16 dense, 494.5 TF32, 1979 FP8), "
      "HBM3 3.35 TB/s",
      "GEMM: 75% of peak for large GEMMs, efficiency x d/(d+192), 132 SMs (as H100); FP8 "
      "GEMMs measured on H800 SXM at 1,378-1,541 TFLOP/s for 8192 x 8192 x 4096-16384 "
      "(tile-lang benchmark/matmul_fp8), 70-78% of the FP8 peak: the same 75%",
      "NVLink: 400 GB/s bidirectional on H800 (export variant); 160 GB/s achieved (DeepSeek-V3 "
      "technical report, section 3.2.2), used as all-reduce busbw and p2p",
      "InfiniBand: 400 Gb/s per GPU, 50 GB/s (DeepSeek-V3 report 3.2.2), 45 GB/s achieved",
      "latency per collective step: 8 us NVLink, 15 us InfiniBand (as H100)"};
  apply_software(h, "meshtrain");
  return h;
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"a100-80gb", "h100-80gb", "h800-80gb"};
  return names;
}

HardwareProfile preset_profile(const std::string& name) {
  if (name == "a100-80gb") return a100();
  if (name == "h100-80gb") return h100();
  if (name == "h800-80gb") return h800();
  throw UsageError(str("unknown --hardware '", name,
                       "' (known: a100-80gb, h100-80gb, h800-80gb, local; or --hardware-file "
                       "FILE.toml)"));
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

double peak_flops(const HardwareProfile& h, Precision precision) {
  return precision == Precision::bf16 ? h.peak_bf16 : h.peak_fp32;
}

bool has_local_bf16(const HardwareProfile& h) {
  return h.peak_bf16 > 0 && h.bf16_convert_s > 0 && h.attention_bf16_fwd_flops > 0 &&
         h.attention_bf16_bwd_flops > 0;
}

bool oversubscribed_probed(const HardwareProfile& h) {
  if (h.oversubscribed_latency_s > 0) return true;
  for (const std::string& line : h.sources)
    if (line.rfind("oversubscribed_latency_s", 0) == 0) return true;
  return false;
}

}  // namespace mt::plan
