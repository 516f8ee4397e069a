#include "plan/memory_model.h"

#include <algorithm>

#include "plan/gpu_memory.h"
#include "plan/memory_bounds.h"
#include "train/memory_estimate.h"

namespace mt::plan {

PlannedMemory lower_bound_memory(const MemoryBounds& b) {
  auto bytes = [](long double v) { return int64_t(std::min(v, kMaxEstimateBytes)); };
  PlannedMemory m;
  m.lower_bound = true;
  m.params = bytes(b.params);
  m.grads = bytes(b.grads);
  m.optimizer = bytes(b.optimizer);
  m.activations = bytes(b.activations);
  m.buffers = bytes(b.buffers);
  return m;
}

PlannedMemory planned_memory(const PlanRequest& r, const Layout& l, const Schedule& schedule) {
  // GPU software other than this engine: what that software keeps (gpu_memory.h).
  if (!r.hardware.local && r.hardware.paper_memory) return software_memory(r, l, schedule);
  const MemoryBounds bounds = memory_bounds(r, l, schedule);
  if (bounds.upper > kMaxEstimateBytes) return lower_bound_memory(bounds);
  // Never this host's kernels (model/kernel_target.h): a GPU preset counts a GPU's, a local
  // plan the CPU its profile was calibrated on.
  const KernelTarget target = r.hardware.local ? KernelTarget::profile : KernelTarget::gpu;
  const MemoryEstimate e =
      estimate_rank_memory(train_options(r, l), schedule, target, profile_kernels(r.hardware));
  PlannedMemory m;
  m.pp_stage = e.pp_stage;
  m.params = e.params_bytes;
  m.grads = e.grads_bytes;
  m.optimizer = e.optimizer_bytes;
  m.activations = e.activations_bytes;
  m.buffers = e.buffers_bytes + e.workspace_bytes;
  if (r.hardware.local) {
    // bf16 runs: the estimate already has the bf16 activation slots (train_options sets
    // the precision locally); the linears' bf16 weight copies sit beside the parameters.
    m.params += e.bf16_weight_bytes;
    m.buffers += e.model_arenas_bytes;
  } else if (l.precision == Precision::bf16) {
    m.activations /= 2;
    if (l.zero < 3) m.params += e.params_bytes / 2;  // bf16 copy of the fp32 weights
    m.buffers -= e.workspace_bytes / 2;
  }
  return m;
}

ProfileKernels profile_kernels(const HardwareProfile& h) {
  ProfileKernels k;
  if (h.attention_kernels >= 1) {
    k.attention = AttentionIsa::from_bits(int(h.attention_kernels + 0.5));
  } else {
    // A profile calibrated before attention_kernels: the register tiles where the probe's
    // kernel kept row statistics (fp32: the AVX-512 tiles; bf16: the AVX512-BF16 tiles, or
    // an AVX-512 CPU's fp32 tiles without them, which such a profile does not tell apart:
    // counted as the former, whose saved form is the larger), nothing else.
    k.attention.fp32_tiles = h.attention_row_stats >= 0.5;
    k.attention.bf16_tiles = h.attention_row_stats_bf16 >= 0.5;
  }
  return k;
}

int64_t usable_bytes_per_rank(const PlanRequest& r) {
  if (r.hardware.local) return int64_t(r.hardware.memory_bytes) / std::max(r.devices, 1);
  return int64_t(r.hardware.memory_bytes) - kGpuReserveBytes;
}

}  // namespace mt::plan
