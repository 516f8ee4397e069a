#include "cli/train_setup.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "comm/fault.h"
#include "comm/hybrid/run_hybrid.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/launcher.h"
#include "core/timer.h"
#include "kernels/gemm_peak.h"
#include "parallel/process_layout.h"
#include "train/checkpoint.h"
#include "train/corpus.h"
#include "train/data_loader.h"
#include "train/memory_estimate.h"
#include "train/path_checks.h"
#include "train/save_lock.h"
#include "train/trainer.h"
#include "train/validate_options.h"

namespace mt {

namespace {

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
  const int start = o.io.load.empty() ? 0 : read_train_state(o.io.load).step;
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
  // The shape is final: every rule of the options, before any rank starts.
  validate_train_options(o, launcher_from_env());
  MT_REQUIRE(start <= o.optim.steps, "--load ", o.io.load, " is at step ", start,
             ", beyond --steps ", o.optim.steps);
  check_fault_spec(o, start);
}

std::string describe_train_layout(const TrainOptions& o) {
  validate_train_options(o, launcher_from_env());
  const ParallelOptions& p = o.parallel;
  return describe_process_layout({p.pp, p.dp, p.tp, p.ep}, o.engine.ranks_per_process);
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
  // The denominator of MFU: the user's figure, else what one core can do, measured now
  // (the best of many short sgemms, kernels/gemm_peak.h).
  info.peak_gflops_per_thread =
      o.optim.peak_gflops > 0 ? o.optim.peak_gflops : measure_sgemm_peak_gflops(1, 0.3);
  WorldOptions wo;
  wo.timeout_s = o.engine.timeout_s;
  const char* check = std::getenv("MESHTRAIN_CHECK_COLLECTIVES");
  wo.check_collectives = check && std::string(check) == "1";
  auto body = [&](CommWorld& world) {
    // validate_train_options compared the layout with the launcher's size already; this
    // catches a launcher whose environment launcher_from_env() does not know.
    MT_REQUIRE(world.size() == o.parallel.world(),
               "the layout needs --pp x --dp x --tp = ", o.parallel.world(), " ranks but the ",
               world.backend_name(), " world has ", world.size(),
               mpi ? " (set mpirun -np x --ranks-per-process to match)" : "");
    train_rank(o, world, info);
  };
  if (mpi && o.engine.ranks_per_process > 1)
    run_hybrid(argc, argv, o.engine.ranks_per_process, wo, body);
  else if (mpi)
    run_mpi(argc, argv, wo, body);
  else
    run_local(o.parallel.world(), wo, body);
  return 0;
}

}  // namespace mt
