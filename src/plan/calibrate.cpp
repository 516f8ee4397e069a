#include "plan/calibrate.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/system_memory.h"
#include "core/timer.h"
#include "data/cache_dir.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/matmul_bf16.h"
#include "plan/calibration_probes.h"
#include "plan/calibration_rounds.h"
#include "plan/profile_fields.h"
#include "plan/software_profiles.h"

namespace mt::plan {

namespace {

// A figure of the summary line: "label value unit", value = field x scale.
struct Shown {
  const char *label, *key;
  double scale;
  const char* unit;
};

// One measurement of the calibration.
struct Probe {
  std::vector<const char*> fields;  // the profile fields it sets
  // Of the round's --calibrate-seconds (0: a fixed cost). The probes that start child
  // processes (training steps, mpirun) measure their extra runs while it lasts and say what
  // they left out (calibration_timing.h ChildBudget); the shares sum past 1: "about".
  double share;
  bool one_thread;                          // a kernel alone, one OpenMP thread
  bool (*applies)(const HardwareProfile&);  // nullptr: always
  void (*measure)(HardwareProfile&, const ProbeRun&);
  const char* source;             // how it measures (the profile's sources, --explain)
  std::vector<Shown> shown;       // its figures in the summary line
  const char* skipped = nullptr;  // said when it does not apply
  // Measured in the first round only: what does not drift with the host's speed (the
  // router's load spread) or is not used by a local plan (MPI between processes).
  bool once = false;
};

bool bf16_here(const HardwareProfile&) {
  return bf16_matmul_supported();
}
// Where the engine's 1-thread ranks run their bf16 linears on the dense tiles.
bool tiles_here(const HardwareProfile&) {
  return bf16_matmul_supported() && dense_bf16_path_available(DenseBf16Path::amx);
}
bool bf16_measured(const HardwareProfile& h) {
  return h.peak_bf16 > 0;
}

// The calibration, in the order it runs: kernels (one thread), the local backend's links,
// MPI, the MoE layer, then real steps of the reference model, which use every figure before.
const std::vector<Probe> kProbes = {
    {{"peak_fp32", "gemm_efficiency"},
     0.3,
     true,
     nullptr,
     measure_sgemm_peak,
     "best single-thread sgemm (engine GEMM path) of 512..2048 squares; efficiency 1",
     {{"sgemm", "peak_fp32", 1e-9, "GFLOP/s per thread"}}},
    {{"parallel_efficiency"},
     0.06,
     true,
     nullptr,
     measure_parallel_efficiency,
     "sgemm rate of every core at once over cores x one core's (the reference step's value "
     "below replaces it where that runs)",
     {}},
    {{"gemm_half_dim", "gemm_half_rows", "gemm_few_rows"},
     0.15,
     true,
     nullptr,
     measure_gemm_halves,
     "1024x1024x64 and 128x1024x1024 sgemms (128: a 128-token sequence) solved for the "
     "formula's two shares; gemm_few_rows: d256 linears' 3 passes, cold, 32 / 1024 rows",
     {{"half-rate dim", "gemm_half_dim", 1, ""}, {"rows", "gemm_half_rows", 1, ""}}},
    {{"gemm_input_grad_ratio", "gemm_weight_grad_ratio"},
     0.06,
     true,
     nullptr,
     measure_backward_ratios,
     "the linear layer's input-/weight-gradient GEMM time over 2MNK / peak, mean of 1024 x "
     "512 -> 1024 and 1024 x 1024 -> 256",
     {{"backward GEMMs fp32", "gemm_input_grad_ratio", 1, "/"},
      {"", "gemm_weight_grad_ratio", 1, "x the peak's"}}},
    {{"kernel_overhead_s"},
     0.02,
     true,
     nullptr,
     measure_kernel_overhead,
     "a 16^3 sgemm call",
     {{"overhead", "kernel_overhead_s", 1e6, "us"}}},
    {{"memory_bw"},
     0.1,
     true,
     nullptr,
     measure_memory_bw,
     "one thread streaming y += x over 32 MiB",
     {{"stream", "memory_bw", 1e-9, "GB/s"}}},
    {{"attention_fwd_flops", "attention_bwd_flops", "attention_row_stats", "attention_kernels"},
     0.1,
     true,
     nullptr,
     measure_attention,
     "the engine's attention kernel, B 8 T 128 C 256 NH 8, one thread, caches emptied "
     "before each call",
     {{"attention", "attention_fwd_flops", 1e-9, "/"},
      {"", "attention_bwd_flops", 1e-9, "GFLOP/s"}}},
    {{"pointwise_s"},
     0.06,
     true,
     nullptr,
     measure_pointwise,
     "the slower of GELU and LayerNorm forward per element, one thread",
     {{"pointwise", "pointwise_s", 1e9, "ns/element"}}},
    {{"cp2_attention_factor", "cp4_attention_factor", "cp2_attention_factor_bf16",
      "cp4_attention_factor_bf16", "cp_hop_s", "cp_hop_byte_s"},
     0.1,
     true,
     nullptr,
     measure_cp_ring,
     "one cp rank's ring over 1 / cp of one worker's flash kernel (cp_attention_probe.cpp); "
     "its hops' CPU per hop and byte among 4 rank threads as a step's (cp_exchange_probe.cpp)",
     {{"cp2 / cp4 attention", "cp2_attention_factor", 1, "/"},
      {"", "cp4_attention_factor", 1, "x; bf16"},
      {"", "cp2_attention_factor_bf16", 1, "/"},
      {"", "cp4_attention_factor_bf16", 1, "x; cp hop"},
      {"", "cp_hop_s", 1e6, "us of CPU (+ cp_hop_byte_s per byte)"}}},
    {{"peak_bf16"},
     0.15,
     true,
     bf16_here,
     measure_bf16_peak,
     "best single-thread bf16 GEMM (oneDNN matmul_bf16_forward) of 512..2048 squares",
     {{"bf16 GEMM", "peak_bf16", 1e-9, "GFLOP/s"}},
     "bf16 not measured (oneDNN has no bf16 matmul on this CPU): local plans are fp32"},
    {{"gemm_half_dim_bf16", "gemm_half_rows_bf16", "gemm_few_rows_bf16"},
     0.1,
     true,
     bf16_here,
     measure_bf16_halves,
     "the same on the bf16 path",
     {{"half-rate dim", "gemm_half_dim_bf16", 1, ""}, {"rows", "gemm_half_rows_bf16", 1, ""}}},
    {{"gemm_input_grad_ratio_bf16", "gemm_weight_grad_ratio_bf16"},
     0.06,
     true,
     bf16_here,
     measure_bf16_backward_ratios,
     "as the fp32 ratios, on the bf16 path",
     {{"backward GEMMs bf16", "gemm_input_grad_ratio_bf16", 1, "/"},
      {"", "gemm_weight_grad_ratio_bf16", 1, "x the peak's"}}},
    {{"tiles_fwd_flops_bf16", "tiles_bwd_flops_bf16", "tiles_pack_s_bf16"},
     0.04,
     true,
     tiles_here,
     measure_bf16_tiles,
     "the dense AMX tile kernel of 1-thread ranks' bf16 linears (kernels/dense_gemm_bf16.h; "
     "512 -> 1024 and 1024 -> 256 on 1024 rows, packed weights), forward and input-gradient "
     "FLOP/s, and packing both layouts of a weight, per element",
     {{"bf16 tiles", "tiles_fwd_flops_bf16", 1e-9, "GFLOP/s forward"},
      {"", "tiles_bwd_flops_bf16", 1e-9, "input gradient"},
      {"pack", "tiles_pack_s_bf16", 1e9, "ns/element"}},
     "no AMX tiles here: 1-thread ranks run oneDNN, priced on its figures"},
    {{"bf16_overhead_s"},
     0.02,
     true,
     bf16_here,
     measure_bf16_overhead,
     "a 16^3 bf16 call",
     {{"overhead", "bf16_overhead_s", 1e6, "us"}}},
    {{"bf16_convert_s"},
     0.03,
     true,
     bf16_here,
     measure_bf16_convert,
     "to_bf16 of 2 Mi floats, per element",
     {{"to_bf16", "bf16_convert_s", 1e9, "ns/element"}}},
    {{"attention_bf16_fwd_flops", "attention_bf16_bwd_flops", "attention_row_stats_bf16"},
     0.1,
     true,
     bf16_here,
     measure_bf16_attention,
     "the attention core of a bf16 run (the bf16 block's kernels)",
     {{"bf16-run attention", "attention_bf16_fwd_flops", 1e-9, "/"},
      {"", "attention_bf16_bwd_flops", 1e-9, "GFLOP/s"}}},
    {{"intra_busbw", "intra_latency_s", "p2p_bw_intra", "inter_busbw", "inter_latency_s",
      "p2p_bw_inter"},
     0.25,
     false,
     nullptr,
     measure_local_links,
     "local backend, two rank threads placed as a step's (train --bind auto: a core each "
     "where they fit), 16 MiB all-reduce / send; latency: a 4 B all-reduce after each "
     "1024x128x256 sgemm (the tp2 attention projection), last return less last arrival, "
     "median, / 2 steps (one node: inter_* the same)",
     {{"all-reduce busbw", "intra_busbw", 1e-9, "GB/s"},
      {"latency", "intra_latency_s", 1e6, "us"},
      {"p2p", "p2p_bw_intra", 1e-9, "GB/s"}}},
    {{"oversubscribed_latency_s", "oversubscribed_busbw"},
     0,
     false,
     nullptr,
     measure_oversubscribed_latency,
     "what a 4-byte all-reduce adds to 2 x cores rank threads that each run a 128x256x384 "
     "sgemm between collectives, / (2 log2 ranks); busbw: what a 128 KiB all-reduce adds "
     "beyond it there, as 2 (n-1)/n bytes / seconds",
     {{"oversubscribed latency", "oversubscribed_latency_s", 1e6, "us"},
      {"busbw", "oversubscribed_busbw", 1e-9, "GB/s"}}},
    {{"oversubscribed_wake_s"},
     0.05,
     false,
     nullptr,
     measure_oversubscribed_wake,
     "2 x cores rank threads two per core as a step's: rank 0 sleeps in a receive while "
     "rank 1 computes ~1 ms, the others wait; rank 1's send to rank 0 running again, "
     "median over the waits that slept (wake_probe.cpp)",
     {{"wake", "oversubscribed_wake_s", 1e6, "us"}}},
    {{"mpi_busbw", "mpi_latency_s", "mpi_p2p_bw"},
     0.2,
     false,
     nullptr,
     measure_mpi_links,
     "meshtrain bench comm --backend mpi under mpirun -np 2: 16 MiB all-reduce busbw, 4 B "
     "all-reduce time / 2, 16 MiB broadcast busbw",
     {{"MPI busbw", "mpi_busbw", 1e-9, "GB/s"},
      {"latency", "mpi_latency_s", 1e6, "us"},
      {"p2p", "mpi_p2p_bw", 1e-9, "GB/s"}},
     nullptr,
     true},
    {{"grouped_fwd_flops", "grouped_bwd_flops", "grouped_wgt_flops"},
     0.03,
     true,
     nullptr,
     measure_grouped_gemm,
     "the engine's grouped expert GEMMs (kernels/grouped_gemm.h: fc and proj of 4 experts, "
     "2048 rows, C 256, H 1024), forward / input gradient / weight gradient, one thread, "
     "caches emptied",
     {{"grouped expert GEMM", "grouped_fwd_flops", 1e-9, "GFLOP/s forward"}}},
    {{"grouped_fwd_flops_bf16", "grouped_bwd_flops_bf16", "grouped_wgt_flops_bf16"},
     0.03,
     true,
     bf16_measured,
     measure_grouped_gemm_bf16,
     "the same in bf16",
     {{"bf16", "grouped_fwd_flops_bf16", 1e-9, "GFLOP/s forward"}}},
    {{"moe_fwd_s", "moe_bwd_s", "moe_wgt_s"},
     0.04,
     true,
     nullptr,
     measure_moe_layer,
     "the engine's MoE layer (N 1024, C 256, 4 experts top-2, one thread, caches emptied) "
     "per pass less the planner's GEMM time for its router and experts, per expert hidden "
     "element",
     {{"MoE rest", "moe_fwd_s", 1e9, "ns/element forward"}}},
    {{"moe_fwd_s_bf16", "moe_bwd_s_bf16", "moe_wgt_s_bf16"},
     0.04,
     true,
     bf16_measured,
     measure_moe_layer_bf16,
     "the same under bf16",
     {}},
    {{"moe_load_cv"},
     0.2,
     false,
     nullptr,
     measure_moe_load_spread,
     "per-expert load spread of meshtrain train --experts 4 (4L d256 T128 B8), steps 3-10",
     {{"MoE load cv", "moe_load_cv", 1, ""}},
     nullptr,
     true},
    {{"step_factor_fp32", "microbatch_weight_s"},
     1.0,
     false,
     nullptr,
     measure_reference_step,
     "a real one-rank step (meshtrain train, 4L d256 T128 B8, one thread, median of steps "
     "3-8) in 1, 8, 2 and 4 microbatches, one run each per round, against this "
     "profile's kernel prediction K for each: step = factor x K + microbatches x linear "
     "weights x microbatch_weight_s, fitted to the four by least squares on the relative "
     "error; the factor scales every local compute cost",
     {{"a real fp32 step", "step_factor_fp32", 1, "x its kernels"}}},
    {{"step_factor_bf16", "microbatch_weight_s_bf16"},
     0.5,
     false,
     bf16_measured,
     measure_reference_step_bf16,
     "the same under bf16",
     {{"a real bf16 step", "step_factor_bf16", 1, "x its kernels"}}},
    {{"parallel_efficiency"},
     0.2,
     false,
     nullptr,
     measure_step_parallel_efficiency,
     "the value for which this profile predicts a real dp 2 step of the reference model "
     "(ZeRO 0, fp32, one thread per rank) as measured",
     {{"all cores at", "parallel_efficiency", 100, "% of one core's rate each"}}}};

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(CPU_COUNT(&set), 1);
  return std::max(int(std::thread::hardware_concurrency()), 1);
}

double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

// What is known before measuring: one shared-memory machine, its cores and free memory.
HardwareProfile local_baseline() {
  HardwareProfile h;
  h.name = "local";
  h.local = true;
  apply_software(h, kLocalSoftware);
  h.devices_per_node = 1 << 20;
  h.cores = usable_cores();
  const int64_t avail = available_memory_bytes();
  h.memory_bytes = avail > 0 ? double(avail) : 8.0 * (1 << 30);
  return h;
}

std::string source_line(const Probe& p) {
  std::string fields;
  for (const char* f : p.fields) fields += (fields.empty() ? "" : ", ") + std::string(f);
  return fields + ": " + p.source;
}

// The one-line summary, every figure of every probe that ran.
std::string summary(const HardwareProfile& h, const std::vector<const Probe*>& ran) {
  std::string out;
  for (const Probe* p : ran)
    for (const Shown& s : p->shown) {
      // An empty label continues the figure before ("attention 81.5 / 97.0 GFLOP/s").
      out += *s.label ? str(out.empty() ? "" : ", ", s.label, " ") : std::string(" ");
      char value[32];
      std::snprintf(value, sizeof value, "%.4g", profile_field_value(h, s.key) * s.scale);
      out += value;
      if (*s.unit) out.append(" ").append(s.unit);
    }
  return out;
}

// The profile's place, checked before minutes of measuring: its directory made, and
// whatever is there now a regular file (a FIFO, device or directory is refused; the
// profile replaces a file atomically, core/atomic_file.h).
void prepare_profile_output(const std::string& path) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  require_output_file("--profile", path);
}

// One round: every probe (`first`: the once-only ones too) with its share of the round's
// budget, on top of `h`.
void run_round(HardwareProfile& h, double seconds, double total, bool first,
               std::vector<const Probe*>& ran, std::ostream& log) {
  const int threads = omp_get_max_threads();
  for (const Probe& p : kProbes) {
    if (p.once && !first) continue;
    if (p.applies && !p.applies(h)) {
      if (p.skipped && first) log << p.skipped << "\n";
      continue;
    }
    omp_set_num_threads(p.one_thread ? 1 : threads);
    p.measure(h, ProbeRun{p.share * seconds, total, log});
    if (first) ran.push_back(&p);
  }
  omp_set_num_threads(threads);
}

// A real calibration (>= 10 s) runs 3 rounds of every probe, a short one (the tests') one.
int calibration_rounds(double seconds) {
  return seconds >= 10 ? 3 : 1;
}

}  // namespace

HardwareProfile calibrate_local(const std::string& path, double seconds, std::ostream& log) {
  prepare_profile_output(path);
  const double t_start = now_seconds(), load_before = load_average();
  const int rounds = calibration_rounds(seconds);
  std::vector<HardwareProfile> measured;
  std::vector<const Probe*> ran;
  for (int round = 0; round < rounds; ++round) {
    // Later rounds start from the first, which holds the once-only figures.
    HardwareProfile h = round == 0 ? local_baseline() : measured.front();
    run_round(h, seconds / rounds, seconds, round == 0, ran, log);
    measured.push_back(std::move(h));
  }
  HardwareProfile h = combine_rounds(measured, reference_step_prediction);
  log_band(h, rounds, log);
  const double load_after = load_average();
  if (std::max(load_before, load_after) > 0.5 * h.cores)
    log << "warning: the machine was busy (load average " << load_before << " -> " << load_after
        << " on " << h.cores << " cores): the figures measure that load too, "
        << "parallel_efficiency above all; calibrate on a quiet machine\n";
  char when[224];
  std::snprintf(when, sizeof when,
                "measured by meshtrain plan --calibrate in %.1f s (%d interleaved rounds, the "
                "median of each figure), load average %.2f -> %.2f, %d cores",
                now_seconds() - t_start, rounds, load_before, load_after, h.cores);
  h.sources = {when};
  for (const Probe* p : ran) h.sources.push_back(source_line(*p));
  const std::string bad = profile_field_error(h);
  if (!bad.empty()) throw RuntimeError(str("the calibration measured an invalid figure: ", bad));
  write_file_atomic(path, profile_to_toml(h));
  log << summary(h, ran) << "\n" << h.sources[0] << "\nwrote " << path << "\n";
  return h;
}

std::string default_local_profile_path() {
  if (const char* p = std::getenv("MESHTRAIN_PROFILE"); p && *p) return p;
  return (std::filesystem::path(meshtrain_cache_dir()) / "hardware-local.toml").string();
}

HardwareProfile load_local_profile(const std::string& path) {
  std::error_code ec;
  MT_REQUIRE(std::filesystem::exists(std::filesystem::symlink_status(path, ec)),
             "no local hardware profile at ", path,
             "; run 'meshtrain plan --calibrate' first (or give --profile FILE)");
  HardwareProfile h = load_profile(path);
  MT_REQUIRE(h.local, path, " is not a local profile (local = true); it describes '", h.name, "'");
  return h;
}

}  // namespace mt::plan
