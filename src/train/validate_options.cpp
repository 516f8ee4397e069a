#include "train/validate_options.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "comm/world.h"
#include "core/error.h"
#include "core/threads.h"
#include "kernels/matmul_bf16.h"
#include "model/precision.h"
#include "model/recompute.h"
#include "parallel/data_parallel/replica_sync.h"
#include "parallel/pipeline/stage_partition.h"
#include "parallel/process_layout.h"
#include "schedule/schedule.h"
#include "train/hf_config.h"
#include "train/option_limits.h"
#include "train/validate_context_parallel.h"

namespace mt {

namespace {

constexpr double kMaxRows = limits::kMaxMicrobatchTokens;
constexpr double kMaxElements = limits::kMaxElements;

// A count computed in double, as digits (beyond int64, in scientific notation).
std::string count_text(double v) {
  return v < 9e18 ? std::to_string(static_cast<int64_t>(v)) : str(v);
}

// How the ranks are started: by this process as threads, or one per launched process.
void validate_engine(const TrainOptions& o, const LauncherInfo& launcher) {
  const EngineOptions& e = o.engine;
  // A launcher that started several processes of a local-backend run would make each of
  // them run the whole job alone, all writing the same files.
  MT_REQUIRE(e.backend == Backend::mpi || launcher.size <= 1, "this process is one of ",
             launcher.size, " started by ", launcher.name,
             " (mpirun), but --backend is local: each process would run the whole job alone and "
             "write the same files; add --backend mpi (one rank per process) or run meshtrain "
             "without mpirun");
  MT_REQUIRE(e.timeout_s > 0, "--timeout must be > 0 seconds");
  MT_REQUIRE(e.ranks_per_process >= 1 && e.ranks_per_process <= kMaxLocalRanks,
             "--ranks-per-process must be in 1..", kMaxLocalRanks, " (got ", e.ranks_per_process,
             ")");
  MT_REQUIRE(e.ranks_per_process == 1 || e.backend == Backend::mpi, "--ranks-per-process ",
             e.ranks_per_process,
             " needs --backend mpi (with --backend local every rank is a thread already)");
}

// The model's own shape rules live with the model (the sample command applies them too).
// --dropout: every block, precision and layout draws its masks by global token and true
// position (model/dropout_state.h), so nothing is refused but a probability outside [0, 1).
void validate_dropout(const TrainOptions& o) {
  const float p = o.model.dropout;
  MT_REQUIRE(p >= 0 && p < 1, "--dropout must be at least 0 and below 1 (got ", p, ")");
}

void validate_model(const TrainOptions& o) {
  o.model.validate();
  validate_dropout(o);
  if (!o.io.export_hf.empty()) require_hf_exportable(o.model, "--export-hf");
}

void validate_optimizer(const OptimOptions& t) {
  MT_REQUIRE(t.steps >= 0, "--steps must be >= 0 (got ", t.steps, ")");
  MT_REQUIRE(t.batch >= 1, "--batch must be >= 1 (got ", t.batch, ")");
  MT_REQUIRE(t.lr > 0, "--lr must be > 0 (got ", t.lr, ")");
  MT_REQUIRE(t.min_lr >= 0, "--min-lr must be >= 0 (got ", t.min_lr, ")");
  MT_REQUIRE(t.warmup >= 0, "--warmup must be >= 0 (got ", t.warmup, ")");
  MT_REQUIRE(t.weight_decay >= 0, "--weight-decay must be >= 0");
  MT_REQUIRE(t.grad_clip >= 0, "--grad-clip must be >= 0 (0 disables clipping)");
  MT_REQUIRE(t.beta1 >= 0 && t.beta1 < 1 && t.beta2 >= 0 && t.beta2 < 1,
             "--beta1 and --beta2 must be in [0, 1)");
  MT_REQUIRE(t.eps > 0, "--eps must be > 0");
  MT_REQUIRE(t.precision == Precision::fp32 || bf16_matmul_supported(),
             "--precision bf16 needs a CPU on which oneDNN runs bf16 matmuls (AVX512 or newer); "
             "this one has none: use --precision fp32");
  require_thread_count("--threads", t.threads);
  // 0 is the default (measure), so that a --print-config file reads back as it was written.
  MT_REQUIRE(std::isfinite(t.peak_gflops) && t.peak_gflops >= 0,
             "--peak-gflops must be > 0 (GFLOP/s per thread), or 0 to measure at start-up (got ",
             t.peak_gflops, ")");
  MT_REQUIRE(t.eval_every >= 0 && t.eval_batches >= 1,
             "--eval-every must be >= 0 and --eval-batches >= 1");
}

// The rank grid and how the batch and the model divide over it.
void validate_layout(const TrainOptions& o, const LauncherInfo& launcher) {
  const ParallelOptions& p = o.parallel;
  const int batch = o.optim.batch;
  for (auto [name, v] : {std::pair{"--dp", p.dp},
                         {"--tp", p.tp},
                         {"--pp", p.pp},
                         {"--ep", p.ep},
                         {"--microbatches", p.microbatches},
                         {"--virtual-stages", p.virtual_stages}})
    MT_REQUIRE(v >= 1, name, " must be >= 1 (got ", v, ")");
  MT_REQUIRE(p.zero >= 0 && p.zero <= 3, "--zero must be 0, 1, 2 or 3 (got ", p.zero, ")");
  MT_REQUIRE(p.bucket_mb > 0, "--bucket-mb must be > 0");
  const long world = static_cast<long>(p.pp) * p.dp * p.cp * p.tp;
  const std::string flags = world_flags_text(p);
  MT_REQUIRE(o.engine.backend == Backend::mpi || world <= kMaxLocalRanks, flags, " = ", world,
             " ranks is more than the ", kMaxLocalRanks,
             " threads one process runs (--backend local); use --backend mpi");
  // Under a launcher the world is the processes it started times the ranks each runs
  // (docs/contracts.md §7: one rank per process unless --ranks-per-process), known here from its
  // environment before MPI is initialised.
  const int k = o.engine.ranks_per_process;
  MT_REQUIRE(world % k == 0, "--ranks-per-process ", k, " does not divide the ", world,
             " ranks of the layout (", flags, ")");
  MT_REQUIRE(
      o.engine.backend != Backend::mpi || !launcher.launched() || long(launcher.size) * k == world,
      "the layout needs ", flags, " = ", world, " ranks but ", launcher.name, " started ",
      launcher.size, " processes", k > 1 ? str(" x ", k, " ranks each") : "", " (set mpirun -np ",
      world / k, " or change the layout)");

  const int64_t split = int64_t(p.dp) * p.microbatches;
  MT_REQUIRE(batch % split == 0, "--batch ", batch,
             " must be divisible by --dp x --microbatches = ", split,
             " (each replica's microbatches must be equal)");
  if (p.tp > 1) {
    MT_REQUIRE(o.model.heads % p.tp == 0, "--tp ", p.tp, " does not divide --heads ", o.model.heads,
               " (each attention head must live on one rank)");
    // Grouped-query attention: a rank holds whole kv heads and the query heads that read
    // them (torchtitan refuses the same; replicating kv heads over tp is not done).
    MT_REQUIRE(!o.model.llama() || o.model.kv() % p.tp == 0, "--tp ", p.tp,
               " does not divide --kv-heads ", o.model.kv(), " (with --heads ", o.model.heads,
               ", each rank must hold whole kv heads and the query heads that read them)");
    // Sequence parallelism splits each microbatch's b*T token rows evenly over tp.
    // Under context parallelism a rank holds seq / cp of each sequence.
    const int64_t rows = batch / split * (o.model.seq / p.cp);
    MT_REQUIRE(!p.sequence_parallel || rows % p.tp == 0, "--sequence-parallel needs the ", rows,
               " token rows of a microbatch (batch / (dp x microbatches) x seq",
               p.cp > 1 ? " / cp" : "", ") divisible by --tp ", p.tp);
  }
}

// What the product of several flags implies must fit what the engine counts with: ranks and
// a microbatch's token rows are ints, element counts int64 (times the bytes and buffers
// per element), a MoE capacity an int. Computed in double, so nothing here overflows.
void validate_sizes(const TrainOptions& o) {
  const ParallelOptions& p = o.parallel;
  const ModelConfig& m = o.model;
  const double world = double(p.pp) * p.dp * p.cp * p.tp;
  MT_REQUIRE(world <= limits::kMaxRanks, world_flags_text(p), " = ", count_text(world),
             " ranks is more than the ", limits::kMaxRanks, " meshtrain supports");
  const double rows = double(o.optim.batch / (int64_t(p.dp) * p.microbatches)) * m.seq;
  MT_REQUIRE(rows <= kMaxRows,
             "a microbatch of batch / (dp x microbatches) x seq = ", count_text(rows),
             " token rows is more than the ", count_text(kMaxRows),
             " a kernel counts: give more --microbatches or --dp, or a smaller --batch or --seq");
  // Every tensor of the model, and one microbatch's activations of one block (llama: q, k, v,
  // o and SwiGLU's three matrices of F, bounded by the same terms with F and the head widths).
  const double C = m.dim, moe = double(m.moe_layers());
  const double width = std::max(C, double(m.heads) * m.head_dim()), F = m.hidden();
  const double block = 4 * C * width + 4 * C + C * C, mlp = 3 * C * F + F + C;
  // An MoE layer: E experts of width Fe (and their routers) for the dense MLP, plus the
  // shared experts' SwiGLU.
  const double Fe = m.expert_hidden(), expert = 3 * C * Fe + Fe + C;
  const double params = m.layers * block +
                        moe * (m.experts * (expert + C) - mlp + 3 * C * m.shared_hidden()) +
                        double(2 * double(m.vocab) + m.position_rows()) * C;
  MT_REQUIRE(params <= kMaxElements, "the model would have ", count_text(params),
             " parameters, more than the ", count_text(kMaxElements),
             " meshtrain can count: fewer --layers, --dim or --experts");
  const double activations = rows * (34 * std::max(C, width) + 4 * F + 5 * double(m.heads) * m.seq);
  MT_REQUIRE(activations <= kMaxElements, "one microbatch's activations of one block would be ",
             count_text(activations), " values, more than the ", count_text(kMaxElements),
             " meshtrain can count: give more --microbatches or --dp, or a smaller --seq");
  // Capacity ceil(tokens x topk x factor / experts) is a token count; a factor of experts /
  // topk already keeps every token.
  MT_REQUIRE(m.experts == 0 || rows * m.topk * m.capacity_factor / m.experts <= kMaxRows,
             "--capacity-factor ", m.capacity_factor, " gives each expert a capacity of ",
             count_text(rows * m.topk * m.capacity_factor / m.experts), " tokens, more than the ",
             count_text(kMaxRows), " it counts; any factor >= --experts / --topk (",
             double(m.experts) / m.topk, ") already keeps every token, and 0 is dropless");
}

// What mixture-of-experts layers compose with (docs/moe.md, "Integration").
void validate_experts(const TrainOptions& o) {
  const ParallelOptions& p = o.parallel;
  const ModelConfig& m = o.model;
  const int experts = m.experts;
  if (p.ep > 1) {
    // ep consecutive dp ranks share the experts of one layer (docs/contracts.md §7).
    MT_REQUIRE(experts > 0, "--ep ", p.ep, " needs --experts > 0");
    MT_REQUIRE(p.dp % p.ep == 0, "--ep ", p.ep, " must divide --dp ", p.dp);
    MT_REQUIRE(experts % p.ep == 0, "--ep ", p.ep, " must divide --experts ", experts);
  }
  if (experts == 0) {
    MT_REQUIRE(p.moe_overlap_parts == 1, "--moe-overlap-parts ", p.moe_overlap_parts,
               " needs --experts > 0 (it overlaps the experts' all-to-all)");
    return;
  }
  MT_REQUIRE(m.moe_layers() > 0, "--moe-every ", m.moe_every, " with --layers ", m.layers,
             m.first_dense_layers > 0 ? str(" and --first-dense-layers ", m.first_dense_layers)
                                      : std::string(),
             " makes no block a mixture of experts (block i is one when i >= first-dense-layers "
             "and (i + 1) % moe-every == 0), so --experts would have no effect");
  if (p.tp > 1) {
    // Under tp the experts are replicated and each tp rank routes its run of a microbatch's
    // token rows (model/moe_layer.h): the runs must be equal. Under cp, of its seq / cp rows.
    const int64_t rows = o.optim.batch / (int64_t(p.dp) * p.microbatches) * (m.seq / p.cp);
    MT_REQUIRE(rows % p.tp == 0, "--experts with --tp ", p.tp, " splits each microbatch's ", rows,
               " token rows (batch / (dp x microbatches) x seq", p.cp > 1 ? " / cp" : "",
               ") over tp: they must be divisible by --tp");
    // The shared experts are split over tp as the dense MLP.
    MT_REQUIRE(m.shared_hidden() % p.tp == 0, "--tp ", p.tp,
               " does not divide the shared experts' width --shared-experts x --expert-ffn-dim = ",
               m.shared_hidden());
  }
}

// The schedule and the cut of the model into chunks; both matter only with --pp > 1.
void validate_pipeline(const TrainOptions& o) {
  const ParallelOptions& p = o.parallel;
  if (p.pp == 1) return;
  check_schedule_args(p.schedule, p.pp, p.microbatches, p.virtual_stages);
  const int v = chunks_per_stage(p.schedule, p.virtual_stages);  // 2 for dualpipev
  // A pipeline message's tag carries its model chunk in 8 bits, two tags per chunk, and its
  // microbatch in 16 (comm/communicator.h, make_p2p_tag).
  MT_REQUIRE(int64_t(p.pp) * v <= limits::kMaxModelChunks,
             "--pp x --virtual-stages = ", int64_t(p.pp) * v, " model chunks is more than the ",
             limits::kMaxModelChunks, " a pipeline can address");
  MT_REQUIRE(p.microbatches <= limits::kMaxPipelineMicrobatches, "--microbatches ", p.microbatches,
             " is more than the ", limits::kMaxPipelineMicrobatches,
             " a pipeline (--pp > 1) can address");
  if (!p.stage_layers.empty()) parse_stage_layers(p.stage_layers, o.model.layers, p.pp * v);
}

void validate_io(const IoOptions& io) {
  MT_REQUIRE(io.save_every >= 0, "--save-every must be >= 0");
  MT_REQUIRE(io.report_every >= 0, "--report-every must be >= 0");
  MT_REQUIRE(io.load.empty() || io.init_from.empty(),
             "give one of --load DIR (resume a run: weights, optimizer state, step) or "
             "--init-from FILE (start from weights), not both");
  MT_REQUIRE(io.sample_tokens >= 0, "--sample-tokens must be >= 0");
}

// Checkpoint format, retention, resume and restarts (docs/checkpoints.md).
void validate_checkpoints(const TrainOptions& o) {
  const IoOptions& io = o.io;
  const bool sharded = io.checkpoint_format == CheckpointFormat::sharded;
  MT_REQUIRE(io.keep_checkpoints >= 0, "--keep-checkpoints must be >= 0");
  MT_REQUIRE(io.keep_checkpoints == 0 || (sharded && !io.save.empty()),
             "--keep-checkpoints applies to --checkpoint-format sharded with --save DIR (a "
             "global --save keeps one checkpoint)");
  MT_REQUIRE(!io.save_sync || sharded,
             "--save-sync applies to --checkpoint-format sharded (global saves are synchronous)");
  MT_REQUIRE(!io.resume_auto || !io.save.empty(),
             "--resume auto looks for checkpoints under --save DIR: give --save");
  MT_REQUIRE(!io.resume_auto || (io.load.empty() && io.init_from.empty()),
             "--resume auto chooses the checkpoint itself: drop --load / --init-from");
  MT_REQUIRE(o.engine.max_restarts >= 0, "--max-restarts must be >= 0");
  MT_REQUIRE(o.engine.max_restarts == 0 || o.engine.backend == Backend::local,
             "--max-restarts restarts the ranks of this process (--backend local); under mpirun "
             "wrap the command in scripts/mpirun_supervisor.sh");
  MT_REQUIRE(o.engine.max_restarts == 0 || !io.save.empty(),
             "--max-restarts resumes from the newest checkpoint under --save DIR: give --save "
             "(and --save-every N)");
}

// --dp-sync (parallel/data_parallel/replica_sync.h): what local SGD / DiLoCo compose with.
void validate_dp_sync(const TrainOptions& o) {
  const ParallelOptions& p = o.parallel;
  MT_REQUIRE(p.outer_lr > 0 && p.outer_momentum >= 0 && p.outer_momentum < 1,
             "--outer-lr must be > 0 and --outer-momentum in [0, 1)");
  // The outer step runs in float: a larger rate is Inf there, and every weight NaN.
  MT_REQUIRE(p.outer_lr <= std::numeric_limits<float>::max(), "--outer-lr ", p.outer_lr,
             " does not fit a float (at most ", std::numeric_limits<float>::max(), ")");
  if (p.dp_sync.kind == DpSync::Kind::every_step) return;
  // The replicas' own weights and moments live whole on each of them.
  const std::string sync = dp_sync_text(p.dp_sync);
  MT_REQUIRE(p.zero == 0, "--dp-sync ", sync, " needs --zero 0 (got --zero ", p.zero, ")");
  MT_REQUIRE(o.model.experts == 0, "--dp-sync ", sync, " does not support --experts yet");
  MT_REQUIRE(o.io.save.empty() && o.io.load.empty(), "--dp-sync ", sync,
             " does not support --save/--load yet (the anchor and outer momentum are not saved)");
}

// Flags that configure something this run does not do are refused, so that no setting is
// ignored without a word. A value equal to the default counts as not given (a
// --print-config file, which lists every flag, reads back). A group of one (ZeRO or local
// SGD over --dp 1, gradient buckets at --dp 1) still does what it says and is accepted.
// One exception, a warning instead (option_warnings): --min-lr with a constant schedule.
// Flags that need data (--val-data, --eval-every) are checked where the data is resolved
// (cli/train_setup.cpp).
void validate_dependencies(const TrainOptions& o) {
  const TrainOptions d;
  const IoOptions& io = o.io;
  const OptimOptions& t = o.optim;
  const ParallelOptions& p = o.parallel;
  const ModelConfig& m = o.model;
  const bool diloco = p.dp_sync.kind == DpSync::Kind::diloco;
  struct Needs {
    bool set, missing;
    const char *flag, *needs, *why = "";
  };
  const Needs rules[] = {
      {io.save_sync, io.save.empty(), "--save-sync", "--save DIR"},
      {io.save_every != d.io.save_every, io.save.empty(), "--save-every", "--save DIR"},
      {io.checkpoint_format != d.io.checkpoint_format, io.save.empty(), "--checkpoint-format",
       "--save DIR", " (--load reads either format)"},
      {io.report_every != d.io.report_every, io.metrics.empty(), "--report-every", "--metrics FILE",
       " (the page is written beside it)"},
      {io.export_dtype != d.io.export_dtype, io.export_path.empty() && io.export_hf.empty(),
       "--export-dtype", "--export FILE or --export-hf DIR"},
      {io.sample_prompt != d.io.sample_prompt, io.sample_tokens == 0, "--prompt",
       "--sample-tokens N > 0"},
      {t.eval_batches != d.optim.eval_batches, t.eval_every == 0, "--eval-batches",
       "--eval-every N > 0"},
      {p.outer_lr != d.parallel.outer_lr, !diloco, "--outer-lr", "--dp-sync diloco:H"},
      {p.outer_momentum != d.parallel.outer_momentum, !diloco, "--outer-momentum",
       "--dp-sync diloco:H"},
      {m.topk != d.model.topk, m.experts == 0, "--topk", "--experts E > 0"},
      {m.moe_every != d.model.moe_every, m.experts == 0, "--moe-every", "--experts E > 0"},
      {m.capacity_factor != d.model.capacity_factor, m.experts == 0, "--capacity-factor",
       "--experts E > 0"},
      {m.aux_loss_coef != d.model.aux_loss_coef, m.experts == 0, "--aux-loss-coef",
       "--experts E > 0"},
      {m.router_bias_update != d.model.router_bias_update, m.experts == 0, "--router-bias-update",
       "--experts E > 0"},
      {m.expert_ffn_dim != d.model.expert_ffn_dim, m.experts == 0, "--expert-ffn-dim",
       "--experts E > 0"},
      {m.shared_experts != d.model.shared_experts, m.experts == 0, "--shared-experts",
       "--experts E > 0"},
      {m.first_dense_layers != d.model.first_dense_layers, m.experts == 0, "--first-dense-layers",
       "--experts E > 0"},
      {m.router != d.model.router, m.experts == 0, "--router", "--experts E > 0"},
      {m.routed_scale != d.model.routed_scale, m.experts == 0, "--routed-scale", "--experts E > 0"},
      {p.schedule != d.parallel.schedule, p.pp == 1, "--schedule", "--pp > 1"},
      {p.virtual_stages != d.parallel.virtual_stages, p.pp == 1, "--virtual-stages", "--pp > 1"},
      {!p.stage_layers.empty(), p.pp == 1, "--stage-layers", "--pp > 1"},
      {p.sequence_parallel, p.tp == 1, "--sequence-parallel", "--tp > 1"},
  };
  for (const Needs& r : rules)
    MT_REQUIRE(!r.set || !r.missing, r.flag, " has no effect without ", r.needs, r.why, ": give ",
               r.needs, " or drop ", r.flag);
}

}  // namespace

namespace {

void validate_all(const TrainOptions& o, const LauncherInfo& launcher, bool engine_limits) {
  validate_engine(o, launcher);
  validate_model(o);
  validate_optimizer(o.optim);
  validate_layout(o, launcher);
  validate_context_parallel(o);
  if (engine_limits) validate_sizes(o);
  validate_experts(o);
  // After the expert rules: the mesh behind it needs ep to divide dp.
  if (o.engine.ranks_per_process > 1)
    validate_process_layout(o.parallel.mesh(), o.engine.ranks_per_process);
  validate_pipeline(o);
  validate_dp_sync(o);
  validate_io(o.io);
  validate_checkpoints(o);
  validate_dependencies(o);
}

}  // namespace

void validate_train_options(const TrainOptions& o, const LauncherInfo& launcher) {
  validate_all(o, launcher, /*engine_limits=*/true);
}

void validate_layout_rules(const TrainOptions& o) {
  validate_all(o, {}, /*engine_limits=*/false);
}

std::vector<std::string> option_warnings(const TrainOptions& o) {
  std::vector<std::string> out;
  // Scripts (our PyTorch reference harness among them) pass the schedule's end point with
  // either schedule; refusing it would break them for a setting that changes nothing.
  if (o.optim.lr_schedule == LrKind::constant && o.optim.min_lr != OptimOptions{}.min_lr)
    out.push_back(str("--min-lr ", o.optim.min_lr,
                      " has no effect with --lr-schedule constant (the rate stays --lr)"));
  return out;
}

}  // namespace mt
