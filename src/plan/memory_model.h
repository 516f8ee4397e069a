// Memory per device of a candidate. GPU software other than this engine (a software profile
// with paper_memory: Megatron-LM, Llama 3's stack) is counted as that software keeps it, by
// the papers' formulas (gpu_memory.h). For this engine, locally and on GPU presets, the
// planner does not keep a second memory formula: it asks the engine's own estimate
// (train/memory_estimate.h), which counts what the trainer's constructors reserve and which
// the trainer's memory records match (tests/plan checks that for every kind of layout). That
// estimate describes meshtrain's fp32 engine, so:
//   * local hardware: every part as the engine holds it, plus the model arenas the engine
//     re-allocates at the end of training (its real peak), counted in buffers; under
//     --precision bf16 the engine's own bf16 estimate (bf16 activation slots) and its
//     linears' bf16 weight copies, counted in params.
//   * GPU presets: the same parts, counted for a GPU's kernels rather than this host's
//     (model/kernel_target.h: the attention core as a fused kernel keeps it, the output and
//     each row's log-sum-exp, and no CPU kernel's scratch, so that a GPU plan does not depend
//     on the CPU that runs the planner), without those end-of-run arenas (a GPU engine
//     restores the model to host memory) and, for --precision bf16 (modelled, not in this engine
//     yet), with 2-byte activations (half the fp32 slots) and a bf16 copy of the weights
//     the rank holds whole (2 bytes per parameter beside the fp32 master, as Megatron's
//     mixed precision keeps). The device's reserve (CUDA context, library workspaces)
//     is subtracted from its capacity in fits().
#pragma once

#include <cstdint>

#include "model/kernel_target.h"
#include "plan/layout.h"
#include "schedule/schedule.h"

namespace mt::plan {

struct PlannedMemory {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;
  int pp_stage = 0;  // the stage with the largest footprint
  // The layout is too large for the engine's 64-bit estimate (plan/memory_bounds.h): the
  // parts are a lower bound of its memory, each at most kMaxEstimateBytes.
  bool lower_bound = false;
  int64_t total() const { return params + grads + optimizer + activations + buffers; }
};

// Asks the engine's estimate only where its arithmetic cannot wrap (memory_bounds.h); a
// larger layout gets its lower bound. schedule: make_schedule of the layout's pp, microbatches,
// schedule, virtual stages (any Schedule without pp), passed in because the search shares it
// between candidates.
PlannedMemory planned_memory(const PlanRequest& r, const Layout& l, const Schedule& schedule);

// A layout known only by its lower bound (memory_bounds.h): lower_bound set, each part at
// most kMaxEstimateBytes.
struct MemoryBounds;
PlannedMemory lower_bound_memory(const MemoryBounds& b);

// What a local profile says of its CPU's kernels, for the memory a local plan counts
// (model/kernel_target.h): the calibrated attention_kernels, or in a profile without them
// the register tiles its attention_row_stats[_bf16] name (neither: the probabilities' kernels,
// as local_costs.cpp prices the time). The threads come from the plan.
ProfileKernels profile_kernels(const HardwareProfile& h);

// Bytes a device offers to one rank: a GPU's capacity less kGpuReserveBytes; locally the
// machine's memory shared by every rank.
int64_t usable_bytes_per_rank(const PlanRequest& r);

}  // namespace mt::plan
