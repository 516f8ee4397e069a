#include "cli/train_setup.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "comm/fault.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/launcher.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/gemm_peak.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_partition.h"
#include "train/checkpoint.h"
#include "train/corpus.h"
#include "train/data_loader.h"
#include "train/memory_estimate.h"
#include "train/path_checks.h"
#include "train/save_lock.h"
#include "train/trainer.h"

namespace mt {

namespace {

bool one_of(const std::string& v, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed)
    if (v == a) return true;
  return false;
}

// A launcher that started several processes of a local-backend run would make each of
// them run the whole job alone, all writing the same files.
void check_launcher(const TrainOptions& o) {
  const LauncherInfo l = launcher_from_env();
  MT_REQUIRE(o.engine.backend == "mpi" || l.size <= 1, "this process is one of ", l.size,
             " started by ", l.name,
             " (mpirun), but --backend is local: each process would run the whole job alone and "
             "write the same files; add --backend mpi (one rank per process) or run meshtrain "
             "without mpirun");
}

// MESHTRAIN_FAULT must name a rank and a step the run has, or a chaos test would pass
// without injecting anything. start: the step a --load resumes after.
void check_fault_spec(const TrainOptions& o, int start) {
  const FaultSpec f = fault_spec_from_env();
  if (!f.enabled()) return;
  MT_REQUIRE(f.rank < o.parallel.world(), "MESHTRAIN_FAULT names rank ", f.rank,
             " but the run has ranks 0..", o.parallel.world() - 1);
  MT_REQUIRE(f.step > start && f.step <= o.optim.steps, "MESHTRAIN_FAULT names step ", f.step,
             " but the run takes steps ", start + 1, "..", o.optim.steps,
             " (steps count from 1; it would never fire)");
}

}  // namespace

void resolve_train_options(TrainOptions& o) {
  OptimOptions& t = o.optim;
  ParallelOptions& p = o.parallel;
  check_launcher(o);
  MT_REQUIRE(t.steps >= 0, "--steps must be >= 0 (got ", t.steps, ")");
  MT_REQUIRE(t.batch >= 1, "--batch must be >= 1 (got ", t.batch, ")");
  MT_REQUIRE(t.lr > 0, "--lr must be > 0 (got ", t.lr, ")");
  MT_REQUIRE(t.min_lr >= 0, "--min-lr must be >= 0 (got ", t.min_lr, ")");
  MT_REQUIRE(t.warmup >= 0, "--warmup must be >= 0 (got ", t.warmup, ")");
  MT_REQUIRE(one_of(t.lr_schedule, {"constant", "cosine"}),
             "--lr-schedule must be constant or "
             "cosine (got '",
             t.lr_schedule, "')");
  MT_REQUIRE(t.weight_decay >= 0, "--weight-decay must be >= 0");
  MT_REQUIRE(t.grad_clip >= 0, "--grad-clip must be >= 0 (0 disables clipping)");
  MT_REQUIRE(t.beta1 >= 0 && t.beta1 < 1 && t.beta2 >= 0 && t.beta2 < 1,
             "--beta1 and --beta2 must be in [0, 1)");
  MT_REQUIRE(t.eps > 0, "--eps must be > 0");
  require_thread_count("--threads", t.threads);
  MT_REQUIRE(t.eval_every >= 0 && t.eval_batches >= 1,
             "--eval-every must be >= 0 and --eval-batches >= 1");
  for (auto [name, v] : {std::pair{"--dp", p.dp},
                         {"--tp", p.tp},
                         {"--pp", p.pp},
                         {"--ep", p.ep},
                         {"--microbatches", p.microbatches},
                         {"--virtual-stages", p.virtual_stages}})
    MT_REQUIRE(v >= 1, name, " must be >= 1 (got ", v, ")");
  MT_REQUIRE(p.zero >= 0 && p.zero <= 3, "--zero must be 0, 1, 2 or 3 (got ", p.zero, ")");
  MT_REQUIRE(one_of(p.schedule, {"gpipe", "1f1b", "interleaved", "zb-h1"}),
             "--schedule must be gpipe, 1f1b, interleaved or zb-h1 (got '", p.schedule, "')");
  MT_REQUIRE(p.bucket_mb > 0, "--bucket-mb must be > 0");
  MT_REQUIRE(t.batch % (p.dp * p.microbatches) == 0, "--batch ", t.batch,
             " must be divisible by --dp x --microbatches = ", p.dp * p.microbatches,
             " (each replica's microbatches must be equal)");
  if (p.tp > 1) {
    MT_REQUIRE(o.model.heads % p.tp == 0, "--tp ", p.tp, " does not divide --heads ", o.model.heads,
               " (each attention head must live on one rank)");
    // Sequence parallelism splits each microbatch's b*T token rows evenly over tp.
    const int rows = t.batch / (p.dp * p.microbatches) * o.model.seq;
    MT_REQUIRE(!p.sequence_parallel || rows % p.tp == 0, "--sequence-parallel needs the ", rows,
               " token rows of a microbatch (batch / (dp x microbatches) x seq) divisible by --tp ",
               p.tp);
  }
  if (p.ep > 1) {
    // ep consecutive dp ranks share the experts of one layer (CONTRACTS.md §7).
    MT_REQUIRE(o.model.experts > 0, "--ep ", p.ep, " needs --experts > 0");
    MT_REQUIRE(p.dp % p.ep == 0, "--ep ", p.ep, " must divide --dp ", p.dp);
    MT_REQUIRE(o.model.experts % p.ep == 0, "--ep ", p.ep, " must divide --experts ",
               o.model.experts);
    MT_REQUIRE(p.zero <= 2, "--ep ", p.ep,
               " supports --zero 0, 1 or 2 (got --zero 3: its parameter gathers over dp "
               "would mix different ranks' experts)");
  }
  MT_REQUIRE(o.model.experts == 0 || p.tp == 1,
             "--experts needs --tp 1 for now (the experts are not split over tp)");
  MT_REQUIRE(one_of(o.engine.backend, {"local", "mpi"}), "--backend must be local or mpi (got '",
             o.engine.backend, "')");
  MT_REQUIRE(o.engine.timeout_s > 0, "--timeout must be > 0 seconds");
  MT_REQUIRE(o.io.save_every >= 0, "--save-every must be >= 0");
  MT_REQUIRE(o.io.load.empty() || o.io.init_from.empty(),
             "give one of --load DIR (resume a run: weights, optimizer state, step) or "
             "--init-from FILE (start from weights), not both");
  MT_REQUIRE(o.engine.backend == "mpi" || p.world() <= kMaxLocalRanks,
             "--pp x --dp x --tp = ", p.world(), " ranks is more than the ", kMaxLocalRanks,
             " threads one process runs (--backend local); use --backend mpi");
  MT_REQUIRE(o.io.sample_tokens >= 0, "--sample-tokens must be >= 0");

  // Data: the embedded corpus unless the user brings shards.
  if (o.io.data.empty()) {
    CorpusFiles c = prepare_fortunes_corpus(default_corpus_dir());
    o.io.data = c.train_path;
    if (o.io.val_data.empty()) o.io.val_data = c.val_path;
  }
  // Every path, before any file is opened for its contents (a FIFO would block the open).
  resolve_save_path(o.io);
  const PathCheckReport paths = check_run_paths(o);
  if (!o.io.load.empty() && !paths.checkpoint_verified && !o.io.quiet)
    std::fprintf(stderr,
                 "meshtrain: warning: --load %s has no checksums (written before they were "
                 "recorded); its files cannot be verified\n",
                 o.io.load.c_str());
  check_fault_spec(o, o.io.load.empty() ? 0 : read_train_state(o.io.load).step);
  // Model shape from an init file: the file decides; conflicting flags are errors.
  if (!o.io.init_from.empty()) {
    ModelConfig f = model_config_from_file(o.io.init_from, o.model);
    MT_REQUIRE(!o.seq_given || o.model.seq <= f.seq, "--seq ", o.model.seq,
               " is longer than the position table of ", o.io.init_from, " (", f.seq, " rows)");
    MT_REQUIRE(!o.vocab_given || o.model.vocab == f.vocab, "--vocab ", o.model.vocab,
               " differs from the ", f.vocab, " rows of transformer.wte.weight in ",
               o.io.init_from);
    const int seq = o.seq_given ? o.model.seq : f.seq;
    o.model = f;
    o.model.positions = f.seq;  // keep the whole table; the run uses its first seq rows
    o.model.seq = seq;
    o.vocab_given = true;
  }
  if (!o.vocab_given) {
    // Byte-level by default; GPT-2-tokenized shards bring larger ids.
    TokenShard shard(o.io.data);
    o.model.vocab = std::max(256, shard.max_token_id() + 1);
  }
  o.model.validate();
  if (p.pp > 1) {
    // Surface schedule and --stage-layers mistakes before any rank starts.
    make_schedule(p.schedule, p.pp, p.microbatches, p.virtual_stages);
    if (!p.stage_layers.empty())
      parse_stage_layers(p.stage_layers, o.model.layers, p.pp * p.virtual_stages);
  }
}

int run_training(TrainOptions o, int* argc, char*** argv) {
  const bool mpi = o.engine.backend == "mpi";
  // Under MPI every process parses; only rank 0 should print, which run_mpi arranges.
  resolve_train_options(o);
  check_memory_fits(o);  // before any rank allocates: a refusal with figures, not an OOM kill
  // One writer per --save directory, held until the run ends (train/save_lock.h). Under
  // MPI only the process of global rank 0 writes checkpoints, so only it locks.
  std::optional<SaveDirLock> save_lock;
  if (!o.io.save.empty() && (!mpi || launcher_from_env().rank == 0)) {
    save_lock.emplace(o.io.save);
    for (const std::string& t : save_lock->remove_stale_temporaries())
      if (!o.io.quiet)
        std::printf("meshtrain: removed %s, left by an interrupted save\n", t.c_str());
  }
  RunInfo info;
  info.t0 = now_seconds();
  // One short measurement of what a core can do, the denominator of MFU.
  info.peak_gflops_per_thread = measure_sgemm_peak_gflops(1, 0.3);
  WorldOptions wo;
  wo.timeout_s = o.engine.timeout_s;
  const char* check = std::getenv("MESHTRAIN_CHECK_COLLECTIVES");
  wo.check_collectives = check && std::string(check) == "1";
  auto body = [&](CommWorld& world) {
    MT_REQUIRE(world.size() == o.parallel.world(),
               "the layout needs --pp x --dp x --tp = ", o.parallel.world(), " ranks but the ",
               world.backend_name(), " world has ", world.size(),
               mpi ? " (set mpirun -np to match)" : "");
    train_rank(o, world, info);
  };
  if (mpi)
    run_mpi(argc, argv, wo, body);
  else
    run_local(o.parallel.world(), wo, body);
  return 0;
}

}  // namespace mt
