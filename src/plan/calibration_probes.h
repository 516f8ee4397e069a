// The measurements `meshtrain plan --calibrate` makes, each filling fields of the local
// profile. calibrate.cpp lists them in one table (the fields each sets, its share of the
// time budget, how it measures) and runs them in order; later probes use the figures of
// earlier ones (the backward ratios the peak, the MoE rest the GEMM figures, the reference
// steps everything).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "comm/world.h"
#include "model/precision.h"
#include "plan/hardware_profile.h"

namespace mt::plan {

struct ComputeRates;

struct ProbeRun {
  double seconds;     // this probe's share of the budget
  double total;       // the whole --calibrate-seconds
  std::ostream& log;  // what did not work here, and the reference steps' fit
};

// kernel_probes.cpp: the engine's kernels, one thread.
void measure_sgemm_peak(HardwareProfile& h, const ProbeRun& run);
void measure_parallel_efficiency(HardwareProfile& h, const ProbeRun& run);
void measure_gemm_halves(HardwareProfile& h, const ProbeRun& run);
void measure_backward_ratios(HardwareProfile& h, const ProbeRun& run);
void measure_kernel_overhead(HardwareProfile& h, const ProbeRun& run);
void measure_memory_bw(HardwareProfile& h, const ProbeRun& run);
void measure_attention(HardwareProfile& h, const ProbeRun& run);
void measure_pointwise(HardwareProfile& h, const ProbeRun& run);
void measure_bf16_peak(HardwareProfile& h, const ProbeRun& run);
void measure_bf16_halves(HardwareProfile& h, const ProbeRun& run);
void measure_bf16_backward_ratios(HardwareProfile& h, const ProbeRun& run);
void measure_bf16_tiles(HardwareProfile& h, const ProbeRun& run);
void measure_bf16_overhead(HardwareProfile& h, const ProbeRun& run);
void measure_bf16_convert(HardwareProfile& h, const ProbeRun& run);
void measure_bf16_attention(HardwareProfile& h, const ProbeRun& run);
void measure_moe_layer(HardwareProfile& h, const ProbeRun& run);
// few_rows_probe.cpp: the engine's linears (forward and both gradients, caches emptied) at
// kProbeStepRows rows against kProbeStepRowsRef, per FLOP: the precision path's
// gemm_few_rows of `h` (its other GEMM figures measured before), for which
// local_gemm_seconds prices the two at the measured ratio (few_rows_for_ratio).
double measure_few_rows(const HardwareProfile& h, bool bf16_path, double seconds);
// The few-rows share for which local_gemm_seconds with `r` prices those linears at
// kProbeStepRows rows at `ratio` x their price per FLOP at kProbeStepRowsRef (at least
// kNoRowPenalty).
double few_rows_for_ratio(const ComputeRates& r, double ratio);
// grouped_gemm_probe.cpp: the engine's grouped expert GEMMs, one thread.
void measure_grouped_gemm(HardwareProfile& h, const ProbeRun& run);
void measure_grouped_gemm_bf16(HardwareProfile& h, const ProbeRun& run);
void measure_moe_layer_bf16(HardwareProfile& h, const ProbeRun& run);
// cp_attention_probe.cpp: the context-parallel attention's cost over the one-worker kernel.
// Both precisions (bf16 where oneDNN's bf16 matmul runs, as the bf16 probes).
void measure_cp_attention(HardwareProfile& h, const ProbeRun& run);
// cp_exchange_probe.cpp: the ring's hops as CPU of the rank threads (local backend), per
// hop and rank: a fixed part and a part per byte of the block, from the ring's own calls
// among `cp` rank threads placed as a step's; `seconds` bounds the probe's rounds.
struct CpHopCost {
  double fixed_s = 0, per_byte_s = 0;
};
CpHopCost cp_hop_cost(int cp, double seconds);
void measure_cp_exchange(HardwareProfile& h, const ProbeRun& run);
// Both cp probes, one entry of the calibration's table: the attention 0.8 of the share.
void measure_cp_ring(HardwareProfile& h, const ProbeRun& run);

// comm_probes.cpp: the local backend between rank threads, and MPI between processes.
// The rank threads of the local probes are placed as `meshtrain train` places a step's by
// default (EngineOptions::bind, --bind auto: each rank bound to a core of its own when the
// ranks fit the cores). Unbound, the scheduler often stacks two fresh rank threads on
// one core (placed near the thread that started them), and a waiter that spins there holds the core
// from the very peer it waits for until its spin budget runs out (comm/local/ doorbell.h: 2000
// pauses, ~26 ns each on the Zen 5 guest, ~53 us): the idle probe's 44-73 us per step at stops
// 36-38 and 41 were that budget, not the protocol's (docs/planner.md).
WorldOptions step_placement();
// Runs fn on `ranks` rank threads placed by step_placement, then rank r pinned to the
// (r mod n)-th core the process may use: the oversubscribed probe's 2 x cores ranks sit two
// per core. A step's 4 unbound ranks on 2 cores are so placed while the host is quiet (each
// core one early and one late rank: the "paired" state, few sleeps); the probe's unbound
// ranks fell as often into a "stuck" state (both early ranks on one core, yielding to each
// other, then sleeping) and read 17-48 us where the paired one reads 0-4 (docs/planner.md,
// stops 42 and 43).
void run_paired_ranks(int ranks, const RankMain& fn);
// What a collective adds to a step beyond its ranks' imbalance, from each rank's arrival at
// and return from every call (arrive[r][i], leave[r][i], one clock): the median over calls
// of the last return less the last arrival (0 without calls).
double exposed_collective_seconds(const std::vector<std::vector<double>>& arrive,
                                  const std::vector<std::vector<double>>& leave);
void measure_local_links(HardwareProfile& h, const ProbeRun& run);
void measure_oversubscribed_latency(HardwareProfile& h, const ProbeRun& run);
// The oversubscribed busbw from what an all-reduce of `bytes` added (`seconds`) among
// `ranks` busy rank threads: 0 when nothing measurable, never above the idle busbw.
double oversubscribed_busbw_from(double bytes, double seconds, int ranks, double idle_busbw);
void measure_mpi_links(HardwareProfile& h, const ProbeRun& run);
// wake_probe.cpp: the wall from a peer's send to a sleeping receiver running again among
// 2 x cores rank threads (the others computing; others_busy false: waiting), median and
// p90 over the waits that slept, and the share of waits that slept.
struct WakeCost {
  double median_s = 0, p90_s = 0, slept_share = 0;
  int samples = 0;
};
WakeCost wake_cost(int cores, double seconds, bool others_busy);
void measure_oversubscribed_wake(HardwareProfile& h, const ProbeRun& run);

// reference_steps.cpp: real `meshtrain train` steps of the reference model, in children.
void measure_moe_load_spread(HardwareProfile& h, const ProbeRun& run);
void measure_reference_step(HardwareProfile& h, const ProbeRun& run);
void measure_reference_step_bf16(HardwareProfile& h, const ProbeRun& run);
void measure_step_parallel_efficiency(HardwareProfile& h, const ProbeRun& run);
// What h predicts for the one-rank reference step in one microbatch (0 when it cannot).
double reference_step_prediction(const HardwareProfile& h, Precision precision);

// This binary's path ("" when /proc is not there): the probes run it as a child.
std::string own_executable();

}  // namespace mt::plan
