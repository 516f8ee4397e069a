// What one rank of a training run will hold in memory, computed from the options before
// any rank starts, so that a run too large for the machine is refused with figures and a
// remedy (exit 2) instead of dying in std::bad_alloc or, where the kernel overcommits, at
// the hands of the OOM killer with no message at all.
//
// The estimate counts what the constructors reserve rather than a textbook formula or a
// second account of them, because the details matter at the sizes where the check decides
// (each tensor and slot buffer rounded up to 16 floats, the vocabulary padded to a multiple
// of tp, units padded to dp*16 floats, the bucket pool, ...):
//   * the model: a dry run of the rank's chunks (model/dry_model.h), built by the trainer's
//     own constructors without memory, one block of each kind standing for the others. It
//     gives each unit's parameters, the activation slot, the workspaces the chunks and
//     their layers hold, and the bf16 weight copies. Each rank holds its pipeline stage's
//     chunks (resolve_stage_layers); the tied wte lives on the first and the last stage.
//   * data parallelism: DataParallel::memory_of, the flat layout, gradient storage, bucket
//     pool and ZeRO-3 gather buffers as the engine's constructor sizes them for these units,
//     and the experts' gradients copied aside under ep.
//   * activations: one slot per microbatch in flight, per local chunk (every chunk has its
//     own pool): 1 without pp; under pp the schedule's own action list decides (gpipe: all
//     m, 1f1b: pp - stage).
//   * outside every arena: the experts' kernels' thread_local buffers (the fused SwiGLU
//     backward's d_act block per OpenMP thread, the weight gradients' gather over several
//     --moe-overlap-parts on the rank's thread; ModelChunk's footprint, kernels/grouped_gemm.h
//     bounds them), per thread x --threads.
//   * what is not sized at construction, counted by rule: AdamW's moments (two per element
//     this rank updates: all at ZeRO 0, 1/dp of them rounded up at ZeRO >= 1, its experts
//     whole under ep), the pipeline transfer buffers, the tied embedding's gradient exchange
//     and the data loader's token batch.
//   * the model's own arenas: GPT allocates table-layout parameters and gradients before
//     DataParallel copies them into its layout and frees them, and restore_model allocates
//     both again at the end of training (for export and sampling) while everything else
//     is still held. That end, not the steady state, is the peak; with ZeRO 3 over a large
//     dp these full-size arenas dwarf the shards.
// Stages differ (the embedding, the head, the 1f1b in-flight count), so the estimate is the
// largest stage's; tp and dp ranks of a stage hold the same sizes.
#pragma once

#include <cstdint>
#include <string>

#include "model/kernel_target.h"
#include "schedule/schedule.h"
#include "train/options.h"

namespace mt {

struct MemoryEstimate {
  // The parts the trainer's memory record measures (its params_bytes and grads_bytes
  // include the buffers, which are listed separately here).
  int64_t params_bytes = 0;       // parameters held (flat, or the ZeRO-3 shard)
  int64_t grads_bytes = 0;        // gradients held (flat, or the ZeRO-2/3 shard)
  int64_t optimizer_bytes = 0;    // AdamW moments
  int64_t activations_bytes = 0;  // activation slots at the in-flight peak
  int64_t buffers_bytes = 0;      // ZeRO-3 gather buffers + ZeRO-2/3 gradient bucket pool
  // Not in the record.
  int64_t workspace_bytes = 0;     // scratch arenas, transfer buffers, token batch
  int64_t bf16_weight_bytes = 0;   // --precision bf16: the linears' bf16 weight copies
  int64_t model_arenas_bytes = 0;  // GPT's table-layout arenas (at startup and at the end)
  int pp_stage = 0;                // the stage this estimate describes (the largest)

  // Steady state during training.
  int64_t total() const {
    return params_bytes + grads_bytes + optimizer_bytes + activations_bytes + buffers_bytes +
           workspace_bytes + bf16_weight_bytes;
  }
  // What the memory record reports (params + grads + optimizer + activations).
  int64_t recorded() const { return total() - workspace_bytes - bf16_weight_bytes; }
  // The end of training: the steady state plus the restored model arenas.
  int64_t peak() const { return total() + model_arenas_bytes; }
};

// The largest per-rank estimate over the pipeline stages. UsageError for layouts the
// trainer would refuse as well (e.g. a batch not divisible by dp x microbatches).
MemoryEstimate estimate_rank_memory(const TrainOptions& o);
// The same with the pipeline schedule already built (make_schedule of o's pp, microbatches,
// schedule and virtual stages; ignored without pp): the planner estimates thousands of
// layouts that share a few schedules. One dry run per call, a few blocks whatever the
// model's depth. target: whose kernels are counted (model/kernel_target.h): this host's (the
// trainer's check), a calibrated profile's CPU (the planner's local plans: profile says what
// of its kernels, its threads taken from o's --threads), or a GPU's (the planner's GPU
// presets: the fused attention's saved form and workspaces, no CPU kernel's scratch).
MemoryEstimate estimate_rank_memory(const TrainOptions& o, const Schedule& schedule,
                                    KernelTarget target = KernelTarget::this_host,
                                    const ProfileKernels& profile = {});

// Ranks sharing this machine's memory: every rank for the local backend (threads of one
// process), the launcher's processes on this host under --backend mpi (else 1).
int ranks_on_this_host(const TrainOptions& o);

// The one-line refusal, or "" when ranks x estimate fits into available_bytes.
std::string memory_refusal(const TrainOptions& o, const MemoryEstimate& e, int ranks,
                           int64_t available_bytes, bool limit_from_env);

// Throws UsageError (exit 2) when the ranks on this host would need more memory than is
// available: MESHTRAIN_MEMORY_LIMIT_BYTES when set (a cap, and how tests pin the figure),
// else available_memory_bytes(). Does nothing when neither is known.
void check_memory_fits(const TrainOptions& o);

}  // namespace mt
