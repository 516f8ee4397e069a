// The step-rows probe (calibration_probes.h): what few rows cost the engine's own linear
// layers as a step runs them. The 128-row sgemm of the halves probe (kernel_probes.cpp) sees
// a warm weight in the layout sgemm packs; a step's linear at 32 rows (cp 4 of a 128-token
// sequence) finds its weight out of the cache, written or read by the layers between, and
// its weight gradient reduces over those 32 rows only. Measured at stop 46 (Zen 5, one
// thread, the loop model's d256 linears, caches emptied): per FLOP, 32 rows cost 2.3-2.4x
// what 1024 do where the formula with the 128-row figure alone prices 1.4x.
#include <vector>

#include "kernels/bf16.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "plan/calibration_probes.h"
#include "plan/calibration_timing.h"
#include "plan/hardware_costs.h"

namespace mt::plan {

namespace {

// The loop model's block linears (bench/planner/loop_layouts.py: d 256, llama): qkv, the
// attention projection, [gate; up] and down, as {inputs, outputs}.
constexpr int kShapes[][2] = {{256, 512}, {256, 256}, {256, 2048}, {1024, 256}};

// One linear's three passes at M rows, each timed alone with the caches emptied (in a step
// a layer's forward and its two gradients run far apart): forward, input gradient, weight
// gradient seconds summed.
double linear_passes_seconds(bool bf16_path, int M, int in, int out, double seconds) {
  std::vector<float> x(size_t(M) * in, 0.1f), w(size_t(out) * in, 0.02f), y(size_t(M) * out);
  std::vector<float> dy(y.size(), 0.01f), dx(x.size()), dw(w.size());
  const bf16 one = float_to_bf16(0.1f), small = float_to_bf16(0.02f);
  std::vector<bf16> x16(x.size(), one), w16(w.size(), small), dy16(y.size(), small);
  const double s = seconds / 3;
  if (bf16_path)
    return best_time_cold(s,
                          [&] {
                            matmul_bf16_forward(y.data(), x16.data(), w16.data(), nullptr, M, in,
                                                out);
                          }) +
           best_time_cold(s,
                          [&] {
                            matmul_bf16_backward_input(dx.data(), dy16.data(), w16.data(), M, in,
                                                       out, false);
                          }) +
           best_time_cold(s, [&] {
             matmul_bf16_backward_weight(dw.data(), nullptr, dy16.data(), x16.data(), M, in, out);
           });
  return best_time_cold(
             s, [&] { matmul_forward(y.data(), x.data(), w.data(), nullptr, M, in, out); }) +
         best_time_cold(
             s, [&] { matmul_backward_input(dx.data(), dy.data(), w.data(), M, in, out); }) +
         best_time_cold(s, [&] {
           matmul_backward_weight(dw.data(), nullptr, dy.data(), x.data(), M, in, out);
         });
}

// The block's linears at M rows: seconds per forward FLOP (2 M in out each).
double seconds_per_flop(bool bf16_path, int M, double seconds) {
  const double share = seconds / (sizeof(kShapes) / sizeof(kShapes[0]));
  double t = 0, flops = 0;
  for (const auto& [in, out] : kShapes) {
    t += linear_passes_seconds(bf16_path, M, in, out, share);
    flops += 2.0 * M * in * out;
  }
  return t / flops;
}

// What the planner prices the block's linears at M rows with row share `few` at and below
// kProbeStepRows (local_gemm_seconds, every pass the forward's shape), per forward FLOP.
double priced_per_flop(ComputeRates r, double few, double M) {
  r.gemm_few_rows = few;
  double t = 0, flops = 0;
  for (const auto& [in, out] : kShapes) {
    t += local_gemm_seconds(r, M, out, in);
    flops += 2.0 * M * in * out;
  }
  return t / flops;
}

}  // namespace

double few_rows_for_ratio(const ComputeRates& r, double ratio) {
  const double ref = priced_per_flop(r, 0, kProbeStepRowsRef);
  // The price at kProbeStepRows grows with the share: bisect for the measured ratio.
  double lo = kNoRowPenalty, hi = 1e4;
  if (priced_per_flop(r, lo, kProbeStepRows) >= ratio * ref) return lo;
  if (priced_per_flop(r, hi, kProbeStepRows) <= ratio * ref) return hi;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (priced_per_flop(r, mid, kProbeStepRows) < ratio * ref ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double measure_few_rows(const HardwareProfile& h, bool bf16_path, double seconds) {
  const double few = seconds_per_flop(bf16_path, int(kProbeStepRows), seconds / 2);
  const double ref = seconds_per_flop(bf16_path, int(kProbeStepRowsRef), seconds / 2);
  HardwareProfile g = h;
  g.step_factor_fp32 = g.step_factor_bf16 = 0;
  return few_rows_for_ratio(compute_rates(g, bf16_path ? Precision::bf16 : Precision::fp32, 1, 1),
                            few / ref);
}

}  // namespace mt::plan
