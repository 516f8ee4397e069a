#include "train/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "core/error.h"
#include "core/system_memory.h"
#include "model/block.h"
#include "model/dry_model.h"
#include "model/gpt.h"
#include "model/zigzag_layout.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "parallel/pipeline/stage_chunks.h"
#include "schedule/schedule.h"

namespace mt {

namespace {

constexpr int64_t kFloat = sizeof(float);

// The microbatch in sequences: b = batch / (dp x microbatches).
int microbatch_size(const TrainOptions& o) {
  const int split = o.parallel.dp * o.parallel.microbatches;
  MT_REQUIRE(o.optim.batch % split == 0, "--batch ", o.optim.batch,
             " must be divisible by --dp x --microbatches = ", split);
  return o.optim.batch / split;
}

DryModelShape dry_shape(const TrainOptions& o, KernelTarget target, ProfileKernels profile) {
  const ParallelOptions& par = o.parallel;
  DryModelShape shape;
  shape.tp = par.tp;
  shape.ep = par.ep;
  shape.moe_overlap_parts = par.moe_overlap_parts;
  shape.sequence_parallel = par.sequence_parallel && par.tp > 1;
  shape.max_b = microbatch_size(o);
  shape.recompute = o.optim.recompute;
  shape.precision = o.optim.precision;
  shape.target = target;
  profile.threads = o.optim.threads;  // a profile's ranks run the plan's --threads
  shape.profile = profile;
  return shape;
}

// The chunks each stage holds (the session's chunk_specs), the layer split made once.
std::vector<std::vector<ChunkSpec>> stage_specs(const TrainOptions& o) {
  const ParallelOptions& par = o.parallel;
  if (par.pp == 1) return {GPT::whole_model(o.model)};
  const std::vector<int> layers = resolve_stage_layers(
      o.model, par.pp, chunks_per_stage(par.schedule, par.virtual_stages), par.stage_layers);
  std::vector<std::vector<ChunkSpec>> stages;
  for (int s = 0; s < par.pp; ++s)
    stages.push_back(stage_chunk_specs(layers, par.pp, s, placement_of(par.schedule)));
  return stages;
}

// Slots each local chunk of `stage` holds at once under the schedule (executor.cpp: F
// acquires, B releases, or W when the backward is split); every chunk has its own pool.
std::vector<int> peak_slots(const Schedule& s, int stage) {
  const ActionKind release = s.split_backward ? ActionKind::W : ActionKind::B;
  std::vector<int> live(size_t(s.chunks), 0), peak(size_t(s.chunks), 0);
  for (const Action& a : s.actions[size_t(stage)]) {
    // An F&B pair (DualPipeV) acquires for its F half, then releases for its B half.
    if (a.kind == ActionKind::F || a.kind == ActionKind::FB)
      peak[a.chunk] = std::max(peak[a.chunk], ++live[a.chunk]);
    if (a.kind == release) --live[a.chunk];
    if (a.kind == ActionKind::FB && release == ActionKind::B) --live[a.b_chunk];
  }
  return peak;
}

// The stage's units laid end to end, as GPT's table lays them out (chunk 0's first).
struct StageUnits {
  std::vector<std::pair<size_t, size_t>> ranges;
  std::vector<int> per_chunk;
  int64_t real = 0, expert_real = 0;  // elements
};

// The model's part, read off the dry run: the chunks' workspaces and bf16 copies, the
// experts' kernels' thread_local buffers (every chunk's calls run on the rank's threads, so
// the largest chunk's: per OpenMP thread, `threads` of them, and once on the rank's own),
// the linears' weight-gradient scratch (the largest layer's, once on the rank's own thread),
// and GPT's own table-layout arenas (parameters and gradients: at startup, and again at the
// end of training). The thread_local buffers are the CPU kernels' (this host's or a local
// plan's profile's): none for a GPU target (model/kernel_target.h).
StageUnits add_model(MemoryEstimate& e, const RankFootprint& rank, int threads,
                     KernelTarget target) {
  StageUnits u;
  size_t per_thread = 0, per_rank = 0, per_linear = 0;
  for (const ChunkFootprint& c : rank.chunks) u.ranges.reserve(u.ranges.size() + c.units.size());
  size_t end = 0;
  for (const ChunkFootprint& c : rank.chunks) {
    for (const UnitSize& unit : c.units) {
      u.ranges.push_back({end, end + unit.floats});
      end += unit.floats;
      u.real += int64_t(unit.real);
      u.expert_real += int64_t(unit.expert_real);
    }
    u.per_chunk.push_back(int(c.units.size()));
    e.workspace_bytes += int64_t(c.workspace_floats) * kFloat;
    e.bf16_weight_bytes += int64_t(c.bf16_weight_bytes);
    per_thread = std::max(per_thread, c.thread_scratch_bytes);
    per_rank = std::max(per_rank, c.rank_scratch_bytes);
    per_linear = std::max(per_linear, c.linear_scratch_bytes);
  }
  if (target != KernelTarget::gpu)
    e.workspace_bytes +=
        int64_t(threads) * int64_t(per_thread) + int64_t(per_rank) + int64_t(per_linear);
  e.model_arenas_bytes = 2 * int64_t(end) * kFloat;
  return u;
}

// The data-parallel engine's storage, as its constructor sizes it for these units, and
// AdamW's two moments of every element this rank updates (DataParallel::update_pieces):
// every real element at ZeRO 0; at ZeRO >= 1 its 1/dp of them, rounded up (the padding
// makes the ranks' shares differ by a few elements), and its experts whole under ep.
void add_data_parallel(MemoryEstimate& e, const ParallelOptions& par, const StageUnits& u) {
  const bool ep = par.ep > 1;
  const DataParallelMemory d = DataParallel::memory_of(
      u.ranges, u.per_chunk, par.dp, par.zero, par.bucket_mb, ep ? size_t(u.expert_real) : 0, ep);
  e.params_bytes = int64_t(d.params_bytes - d.param_buffer_bytes);
  e.grads_bytes = int64_t(d.grads_bytes - d.grad_buffer_bytes);
  e.buffers_bytes = int64_t(d.param_buffer_bytes + d.grad_buffer_bytes);
  e.workspace_bytes += int64_t(d.expert_copy_bytes);
  const int64_t dp = par.dp, dense = u.real - u.expert_real;
  int64_t updated = u.real;
  if (par.zero > 0) updated = ep ? (dense + dp - 1) / dp + u.expert_real : (u.real + dp - 1) / dp;
  e.optimizer_bytes = 2 * updated * kFloat;
}

// What a stage holds whatever the schedule: its chunks and the engine's state for them.
struct StageState {
  RankFootprint rank;
  MemoryEstimate held;  // everything but the activations and the transfer buffers
};

StageState stage_state(DryModel& model, const std::vector<ChunkSpec>& specs,
                       const ParallelOptions& par, int threads, KernelTarget target) {
  StageState s;
  s.rank = model.rank(specs);
  add_data_parallel(s.held, par, add_model(s.held, s.rank, threads, target));
  return s;
}

// Stages whose chunks have the same edges and the same kinds of blocks hold the same sizes
// (the dry run's own premise, block_kind): the state is worked out once for each.
std::vector<int> stage_kinds(const ModelConfig& cfg, const std::vector<ChunkSpec>& specs) {
  std::vector<int> key;
  for (const ChunkSpec& c : specs) {
    key.push_back(-1 - int(c.has_embedding) - 2 * int(c.has_head));  // < 0: a chunk starts
    for (int l = c.first_layer; l < c.last_layer; ++l) key.push_back(block_kind(cfg, l));
  }
  return key;
}

// One stage: its state, the slots it holds at the schedule's peak, and what the run
// allocates as it goes rather than at construction: under pp the tied wte's summed
// gradient and the copy it exchanges (tied_embedding.cpp, on the first and the last stage;
// none under DualPipeV)
// and one activation and one gradient transfer buffer per microbatch in flight (the
// executor's); the data loader's batch (tokens and targets of every microbatch).
MemoryEstimate estimate_stage(const TrainOptions& o, int stage, const StageState& state,
                              const std::vector<int>& slots) {
  const ParallelOptions& par = o.parallel;
  MemoryEstimate e = state.held;
  e.pp_stage = stage;
  int64_t in_flight = 0;
  for (size_t k = 0; k < state.rank.chunks.size(); ++k) {
    e.activations_bytes += int64_t(slots[k]) * int64_t(state.rank.chunks[k].slot_floats) * kFloat;
    in_flight += slots[k];
  }
  const int64_t N = int64_t(microbatch_size(o)) * o.model.seq;
  const bool sp = par.sequence_parallel && par.tp > 1;
  const int64_t boundary = sp ? N * o.model.dim / par.tp : N * o.model.dim;
  // DualPipeV's V keeps both ends on stage 0: one wte, nothing exchanged.
  const bool exchanged = placement_of(par.schedule) != ChunkPlacement::v_shape;
  if (par.pp > 1)
    e.workspace_bytes += 2 * (exchanged ? int64_t(state.rank.tied_embedding_numel) : 0) * kFloat +
                         2 * in_flight * boundary * kFloat;
  e.workspace_bytes += 2 * int64_t(par.microbatches) * N * int64_t(sizeof(int));
  return e;
}

std::string amount(double bytes, bool gib) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / (gib ? 1024.0 * 1024 * 1024 : 1024.0 * 1024));
  return buf;
}

std::string human(int64_t bytes) {
  const bool gib = bytes >= (int64_t(1) << 30);
  return amount(double(bytes), gib) + (gib ? " GiB" : " MiB");
}

}  // namespace

MemoryEstimate estimate_rank_memory(const TrainOptions& o) {
  const ParallelOptions& p = o.parallel;
  if (p.pp == 1) return estimate_rank_memory(o, Schedule{});
  return estimate_rank_memory(o, make_schedule(p.schedule, p.pp, p.microbatches, p.virtual_stages));
}

MemoryEstimate estimate_rank_memory(const TrainOptions& given, const Schedule& schedule,
                                    KernelTarget target, const ProfileKernels& profile) {
  // Under context parallelism a rank's blocks run seq / cp rows of each sequence (the model
  // a rank builds, train/session.cpp); ZeRO is counted over dp alone, which over-counts.
  TrainOptions o = given;
  o.model = cp_rank_model(o.model, o.parallel.cp);
  const int pp = o.parallel.pp;
  DryModel model(o.model, dry_shape(o, target, profile));
  const std::vector<std::vector<ChunkSpec>> stages = stage_specs(o);
  std::map<std::vector<int>, StageState> states;
  MemoryEstimate best;
  for (int s = 0; s < pp; ++s) {
    const std::vector<ChunkSpec>& specs = stages[size_t(s)];
    std::vector<int> kinds = stage_kinds(o.model, specs);
    auto it = states.find(kinds);
    if (it == states.end())
      it = states
               .emplace(std::move(kinds),
                        stage_state(model, specs, o.parallel, o.optim.threads, target))
               .first;
    const std::vector<int> slots = pp > 1 ? peak_slots(schedule, s) : std::vector<int>{1};
    const MemoryEstimate e = estimate_stage(o, s, it->second, slots);
    if (s == 0 || e.peak() > best.peak()) best = e;
  }
  return best;
}

int ranks_on_this_host(const TrainOptions& o) {
  if (o.engine.backend != Backend::mpi) return o.parallel.world();
  // Open MPI, then MPICH/Hydra; without either we only know about this process.
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(var)) {
      const int n = std::atoi(v);
      if (n >= 1) return n * o.engine.ranks_per_process;
    }
  return o.engine.ranks_per_process;
}

std::string memory_refusal(const TrainOptions& o, const MemoryEstimate& e, int ranks,
                           int64_t available_bytes, bool limit_from_env) {
  const int64_t per_rank = e.peak(), need = per_rank * int64_t(ranks);
  if (available_bytes <= 0 || need <= available_bytes) return "";
  const ParallelOptions& par = o.parallel;
  // Parts in the per-rank unit, so that they read as a split of the per-rank figure.
  const bool gib = per_rank >= (int64_t(1) << 30);
  auto part = [&](const char* name, int64_t bytes) {
    return bytes > 0 ? str(", ", name, " ", amount(double(bytes), gib)) : std::string();
  };
  std::string parts = part("params", e.params_bytes) + part("grads", e.grads_bytes) +
                      part("optimizer", e.optimizer_bytes) +
                      part("activations", e.activations_bytes) + part("buffers", e.buffers_bytes) +
                      part("workspace", e.workspace_bytes);
  parts += part("model copy at start and end", e.model_arenas_bytes);
  std::string msg =
      str("the run needs about ", human(need), " (", ranks, ranks == 1 ? " rank x " : " ranks x ",
          human(per_rank), par.pp > 1 ? str(" on pipeline stage ", e.pp_stage) : std::string(),
          ": ", parts.substr(2), ") but ",
          limit_from_env ? "MESHTRAIN_MEMORY_LIMIT_BYTES allows " : "this machine has ",
          human(available_bytes), limit_from_env ? "" : " available", "; try ");
  // The remedy follows what dominates.
  const int64_t state =
      e.params_bytes + e.grads_bytes + e.optimizer_bytes + e.buffers_bytes + e.model_arenas_bytes;
  std::vector<std::string> tips;
  const int b = o.optim.batch / (par.dp * par.microbatches);
  if (state >= e.activations_bytes) {
    if (par.dp > 1 && par.zero < 3)
      tips.push_back(par.zero < 2 ? "--zero 2 or 3 (shards optimizer state and gradients over dp)"
                                  : "--zero 3 (also shards the parameters over dp)");
    tips.push_back("more --pp or --tp (splits the model)");
  } else {
    if (b > 1)
      tips.push_back("more --microbatches (smaller activations)");
    else
      tips.push_back("a smaller --batch or --seq (smaller activations)");
    if (par.tp == 1 || !par.sequence_parallel) tips.push_back("more --tp with --sequence-parallel");
  }
  tips.push_back("fewer ranks");
  for (size_t i = 0; i < tips.size(); ++i)
    msg += (i == 0 ? "" : i + 1 == tips.size() ? ", or " : ", ") + tips[i];
  return msg;
}

void check_memory_fits(const TrainOptions& o) {
  int64_t available = 0;
  bool from_env = false;
  if (const char* v = std::getenv("MESHTRAIN_MEMORY_LIMIT_BYTES"); v && *v) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    MT_REQUIRE(end && *end == '\0' && n > 0,
               "MESHTRAIN_MEMORY_LIMIT_BYTES must be a positive number of bytes (got '", v, "')");
    available = n;
    from_env = true;
  } else {
    available = available_memory_bytes();
  }
  if (available <= 0) return;
  const std::string why =
      memory_refusal(o, estimate_rank_memory(o), ranks_on_this_host(o), available, from_env);
  if (!why.empty()) throw UsageError(why);
}

}  // namespace mt
