#include "plan/hardware_profile.h"

#include <toml++/toml.h>
#include <cmath>
#include <fstream>
#include <sstream>

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
  h.memory_bw = 0.85 * 2039e9;  // HBM2e 2,039 GB/s (datasheet) x STREAM-like efficiency
  h.kernel_overhead_s = 4e-6;
  h.intra_busbw = 230e9;  // nccl-tests all_reduce busbw on one DGX A100 (NVLink 3, 600 GB/s bidir.)
  h.intra_latency_s = 8e-6;
  h.inter_busbw = 23e9;  // per GPU/NIC: HDR InfiniBand 200 Gb/s = 25 GB/s, ~92% achieved
  h.inter_latency_s = 15e-6;
  h.p2p_bw_intra = 240e9;  // 300 GB/s per direction, ~80% achieved
  h.p2p_bw_inter = 23e9;
  h.sources = {
      "peak: A100 datasheet, 312 TFLOP/s BF16 dense, 156 TF32 dense (fp32 = TF32 tensor cores)",
      "GEMM: 80% of peak for large GEMMs (cuBLAS), efficiency x d/(d+128) for smallest dim d",
      "HBM: 2,039 GB/s datasheet x 0.85 achievable (stream-type kernels)",
      "NVLink: all-reduce busbw 230 GB/s within a node (nccl-tests on DGX A100)",
      "InfiniBand: HDR 200 Gb/s per GPU, 23 GB/s achieved; a group spanning nodes gets "
      "min(NVLink busbw, members per node x 23 GB/s) (one NIC rail per GPU)",
      "latency per collective step: 8 us NVLink, 15 us InfiniBand (nccl-tests small sizes)"};
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
      "HBM: 3.35 TB/s datasheet x 0.85 achievable",
      "NVLink: all-reduce busbw 370 GB/s within a node (nccl-tests on DGX H100, no NVLS)",
      "InfiniBand: NDR 400 Gb/s per GPU, 45 GB/s achieved; spanning groups as for A100",
      "latency per collective step: 8 us NVLink, 15 us InfiniBand"};
  return h;
}

// Reads one field; a missing key keeps the default, a wrong type is an error.
void read(const toml::table& t, const char* key, double& v, const std::string& path) {
  const toml::node* n = t.get(key);
  if (!n) return;
  if (auto d = n->value<double>()) {
    v = *d;
    return;
  }
  throw UsageError(str(path, ": [hardware] ", key, " must be a number"));
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"a100-80gb", "h100-80gb"};
  return names;
}

HardwareProfile preset_profile(const std::string& name) {
  if (name == "a100-80gb") return a100();
  if (name == "h100-80gb") return h100();
  throw UsageError(str("unknown --hardware '", name,
                       "' (known: a100-80gb, h100-80gb, local; or --hardware-file FILE.toml)"));
}

HardwareProfile load_profile(const std::string& path) {
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw UsageError(str("cannot read hardware profile ", path, ": ", e.description()));
  }
  const toml::table* t = doc["hardware"].as_table();
  MT_REQUIRE(t, path, ": no [hardware] table");
  static const std::vector<std::string> known = {"name",
                                                 "local",
                                                 "devices_per_node",
                                                 "memory_bytes",
                                                 "peak_fp32",
                                                 "peak_bf16",
                                                 "gemm_efficiency",
                                                 "gemm_half_dim",
                                                 "memory_bw",
                                                 "kernel_overhead_s",
                                                 "intra_busbw",
                                                 "intra_latency_s",
                                                 "inter_busbw",
                                                 "inter_latency_s",
                                                 "p2p_bw_intra",
                                                 "p2p_bw_inter",
                                                 "cores",
                                                 "sources",
                                                 "attention_fwd_flops",
                                                 "attention_bwd_flops",
                                                 "pointwise_s",
                                                 "mpi_busbw",
                                                 "mpi_latency_s",
                                                 "mpi_p2p_bw",
                                                 "gemm_half_dim_bf16",
                                                 "bf16_overhead_s",
                                                 "bf16_convert_s",
                                                 "attention_bf16_fwd_flops",
                                                 "attention_bf16_bwd_flops",
                                                 "gemm_input_grad_ratio",
                                                 "gemm_weight_grad_ratio",
                                                 "gemm_input_grad_ratio_bf16",
                                                 "gemm_weight_grad_ratio_bf16",
                                                 "oversubscribed_latency_s",
                                                 "parallel_efficiency"};
  for (auto&& [k, v] : *t) {
    (void)v;
    bool ok = false;
    for (const auto& n : known) ok = ok || n == k.str();
    MT_REQUIRE(ok, path, ": unknown key [hardware] ", std::string(k.str()));
  }
  HardwareProfile h;
  h.name = (*t)["name"].value_or(std::string("custom"));
  h.local = (*t)["local"].value_or(false);
  h.devices_per_node = int((*t)["devices_per_node"].value_or(int64_t(8)));
  h.cores = int((*t)["cores"].value_or(int64_t(0)));
  read(*t, "memory_bytes", h.memory_bytes, path);
  read(*t, "peak_fp32", h.peak_fp32, path);
  read(*t, "peak_bf16", h.peak_bf16, path);
  read(*t, "gemm_efficiency", h.gemm_efficiency, path);
  read(*t, "gemm_half_dim", h.gemm_half_dim, path);
  read(*t, "memory_bw", h.memory_bw, path);
  read(*t, "kernel_overhead_s", h.kernel_overhead_s, path);
  read(*t, "intra_busbw", h.intra_busbw, path);
  read(*t, "intra_latency_s", h.intra_latency_s, path);
  read(*t, "inter_busbw", h.inter_busbw, path);
  read(*t, "inter_latency_s", h.inter_latency_s, path);
  read(*t, "p2p_bw_intra", h.p2p_bw_intra, path);
  read(*t, "p2p_bw_inter", h.p2p_bw_inter, path);
  read(*t, "attention_fwd_flops", h.attention_fwd_flops, path);
  read(*t, "attention_bwd_flops", h.attention_bwd_flops, path);
  read(*t, "pointwise_s", h.pointwise_s, path);
  read(*t, "mpi_busbw", h.mpi_busbw, path);
  read(*t, "mpi_latency_s", h.mpi_latency_s, path);
  read(*t, "mpi_p2p_bw", h.mpi_p2p_bw, path);
  read(*t, "gemm_half_dim_bf16", h.gemm_half_dim_bf16, path);
  read(*t, "bf16_overhead_s", h.bf16_overhead_s, path);
  read(*t, "bf16_convert_s", h.bf16_convert_s, path);
  read(*t, "attention_bf16_fwd_flops", h.attention_bf16_fwd_flops, path);
  read(*t, "attention_bf16_bwd_flops", h.attention_bf16_bwd_flops, path);
  read(*t, "gemm_input_grad_ratio", h.gemm_input_grad_ratio, path);
  read(*t, "gemm_weight_grad_ratio", h.gemm_weight_grad_ratio, path);
  read(*t, "gemm_input_grad_ratio_bf16", h.gemm_input_grad_ratio_bf16, path);
  read(*t, "gemm_weight_grad_ratio_bf16", h.gemm_weight_grad_ratio_bf16, path);
  read(*t, "oversubscribed_latency_s", h.oversubscribed_latency_s, path);
  read(*t, "parallel_efficiency", h.parallel_efficiency, path);
  if (const toml::array* s = (*t)["sources"].as_array())
    for (auto&& n : *s)
      if (auto v = n.value<std::string>()) h.sources.push_back(*v);
  for (auto [key, v] : {std::pair{"memory_bytes", h.memory_bytes},
                        {"peak_fp32", h.peak_fp32},
                        {"memory_bw", h.memory_bw},
                        {"intra_busbw", h.intra_busbw},
                        {"p2p_bw_intra", h.p2p_bw_intra}})
    MT_REQUIRE(std::isfinite(v) && v > 0, path, ": [hardware] ", key, " must be > 0");
  MT_REQUIRE(h.devices_per_node >= 1, path, ": [hardware] devices_per_node must be >= 1");
  MT_REQUIRE(h.gemm_efficiency > 0 && h.gemm_efficiency <= 1, path,
             ": [hardware] gemm_efficiency must be in (0, 1]");
  if (h.peak_bf16 <= 0) h.peak_bf16 = 0;  // no bf16 measured: bf16 not offered
  if (h.inter_busbw <= 0) h.inter_busbw = h.intra_busbw;
  if (h.p2p_bw_inter <= 0) h.p2p_bw_inter = h.p2p_bw_intra;
  return h;
}

std::string profile_to_toml(const HardwareProfile& h) {
  std::ostringstream o;
  o.precision(9);
  o << "# meshtrain hardware profile (meshtrain plan --hardware-file / --hardware local)\n"
    << "[hardware]\n"
    << "name = \"" << h.name << "\"\nlocal = " << (h.local ? "true" : "false") << "\n"
    << "devices_per_node = " << h.devices_per_node << "\ncores = " << h.cores << "\n";
  for (auto [k, v] : {std::pair{"memory_bytes", h.memory_bytes},
                      {"peak_fp32", h.peak_fp32},
                      {"peak_bf16", h.peak_bf16},
                      {"gemm_efficiency", h.gemm_efficiency},
                      {"gemm_half_dim", h.gemm_half_dim},
                      {"memory_bw", h.memory_bw},
                      {"kernel_overhead_s", h.kernel_overhead_s},
                      {"intra_busbw", h.intra_busbw},
                      {"intra_latency_s", h.intra_latency_s},
                      {"inter_busbw", h.inter_busbw},
                      {"inter_latency_s", h.inter_latency_s},
                      {"p2p_bw_intra", h.p2p_bw_intra},
                      {"p2p_bw_inter", h.p2p_bw_inter},
                      {"attention_fwd_flops", h.attention_fwd_flops},
                      {"attention_bwd_flops", h.attention_bwd_flops},
                      {"pointwise_s", h.pointwise_s},
                      {"mpi_busbw", h.mpi_busbw},
                      {"mpi_latency_s", h.mpi_latency_s},
                      {"mpi_p2p_bw", h.mpi_p2p_bw},
                      {"gemm_half_dim_bf16", h.gemm_half_dim_bf16},
                      {"bf16_overhead_s", h.bf16_overhead_s},
                      {"bf16_convert_s", h.bf16_convert_s},
                      {"attention_bf16_fwd_flops", h.attention_bf16_fwd_flops},
                      {"attention_bf16_bwd_flops", h.attention_bf16_bwd_flops},
                      {"gemm_input_grad_ratio", h.gemm_input_grad_ratio},
                      {"gemm_weight_grad_ratio", h.gemm_weight_grad_ratio},
                      {"gemm_input_grad_ratio_bf16", h.gemm_input_grad_ratio_bf16},
                      {"gemm_weight_grad_ratio_bf16", h.gemm_weight_grad_ratio_bf16},
                      {"oversubscribed_latency_s", h.oversubscribed_latency_s},
                      {"parallel_efficiency", h.parallel_efficiency}})
    o << k << " = " << std::scientific << v << std::defaultfloat << "\n";
  o << "sources = [";
  for (size_t i = 0; i < h.sources.size(); ++i) {
    std::string s = h.sources[i];
    for (char& c : s)
      if (c == '"' || c == '\\') c = '\'';
    o << (i ? ", " : "") << "\"" << s << "\"";
  }
  o << "]\n";
  return o.str();
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
