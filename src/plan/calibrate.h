// `meshtrain plan --calibrate`: measures this machine through the engine's own kernels and
// communicators and stores a local hardware profile, which `--hardware local` and
// `train --auto-layout` read. Measured: the single-thread sgemm peak (the engine's GEMM
// path) and how a small GEMM dimension lowers it, a memory-bound pass's bandwidth, the
// per-call overhead of a tiny GEMM, and the local backend's all-reduce bus bandwidth,
// latency and point-to-point bandwidth between two rank threads; for --precision bf16 the
// bf16 GEMM (peak, small-dimension penalty, overhead), the fp32 -> bf16 rounding and the
// attention core a bf16 run uses.
#pragma once

#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "plan/hardware_profile.h"

namespace mt::plan {

// $MESHTRAIN_PROFILE, else hardware-local.toml in the user's cache folder (data/cache_dir.h:
// $XDG_CACHE_HOME/meshtrain or ~/.cache/meshtrain), never the working directory.
std::string default_local_profile_path();

// UsageError naming the path and `meshtrain plan --calibrate` when there is none.
HardwareProfile load_local_profile(const std::string& path);

// One real step of the reference model in `microbatches` microbatches: what the profile's
// kernel figures alone predict for it and the measured median.
struct ReferenceStep {
  int microbatches;
  double kernels_s, measured_s;
};

// The local model of a real one-rank step, step = F x kernels + microbatches x W x c (W: the
// linears' weight elements), fitted to several reference steps by least squares on the
// relative error (each measurement counts alike, whatever its size). {F, c}; c is kept at or
// above a small floor (0 reads as "not measured"), F within [0.5, 3].
std::pair<double, double> fit_step_factor(const std::vector<ReferenceStep>& steps, double weights);

// Measures for about `seconds` in total and writes the profile to path (directories made).
HardwareProfile calibrate_local(const std::string& path, double seconds, std::ostream& log);

}  // namespace mt::plan
