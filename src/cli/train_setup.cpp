#include "cli/train_setup.h"
#include "cli/recorded_config.h"

#include <sys/stat.h>
#include <algorithm>
#include <cstdio>

#include <cstdlib>
#include <optional>
#include <utility>

#include "comm/fault.h"
#include "comm/hybrid/run_hybrid.h"
#include "comm/mpi/launch_agreement.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/launcher.h"
#include "core/timer.h"
#include "data/corpus.h"
#include "data/data_loader.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/gemm_peak.h"
#include "kernels/grouped_gemm.h"
#include "parallel/process_layout.h"
#include "plan/auto_layout.h"
#include "plan/calibrate.h"
#include "report/report_page.h"
#include "train/checkpoint/checkpoint_location.h"
#include "train/checkpoint/checkpoint_paths.h"
#include "train/checkpoint/manifest.h"
#include "train/checkpoint/save_lock.h"
#include "train/dataset_inputs.h"
#include "train/hf_config.h"
#include "train/hf_directory.h"
#include "train/memory_estimate.h"
#include "train/path_checks.h"
#include "train/trainer.h"
#include "train/validate_context_parallel.h"
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

// Warnings are about data (a damaged checkpoint skipped, a leftover kept): --quiet hides
// progress, never these.
void warn(const std::string& text) {
  if (launcher_from_env().rank == 0) std::fprintf(stderr, "meshtrain: warning: %s\n", text.c_str());
}

// Validation data and evaluations need each other; which data there is is known only now
// (--data DIR may bring a validation split, the embedded corpus brings one).
void check_validation_inputs(const TrainOptions& o, bool val_given, const std::string& data) {
  MT_REQUIRE(!val_given || o.optim.eval_every > 0,
             "--val-data has no effect without --eval-every N > 0 (validation runs only then): "
             "give --eval-every N or drop --val-data");
  MT_REQUIRE(o.optim.eval_every <= 0 || !o.io.val_data.empty(), "--eval-every ", o.optim.eval_every,
             " needs validation data: give --val-data FILE|DIR, or --data DIR prepared with a "
             "validation split (--data ",
             data, " has none)");
}

// A stream of tokens (the training data; the validation data when the run evaluates) must
// hold one global batch and ids below the vocabulary: found here, not by the ranks' loaders.
void check_token_stream(const TrainOptions& o, const char* flag, const std::string& first,
                        const std::vector<std::string>& shards) {
  int64_t tokens = 0;
  std::string bad;  // where the first id outside the vocabulary is, and what it is
  for (const std::string& p : shards.empty() ? std::vector<std::string>{first} : shards) {
    const TokenShard shard(p);
    tokens += shard.size();
    const int64_t at = shard.first_token_at_least(o.model.vocab);
    if (at >= 0 && bad.empty())
      bad = str(" holds token id ", shard.token(at), " (token ", at, p == first ? "" : " of " + p,
                ", the first id outside the vocabulary)");
  }
  const int64_t need = int64_t(o.optim.batch) * o.model.seq + 1;
  const std::string what =
      str(flag, " ", first, shards.size() > 1 ? " (with its dataset's other shards)" : "");
  MT_REQUIRE(tokens >= need, what, " holds ", tokens,
             " tokens, fewer than one batch needs (--batch x --seq + 1 = ", o.optim.batch, " x ",
             o.model.seq, " + 1 = ", need, ")");
  MT_REQUIRE(bad.empty(), what, bad, " but the model vocab is ", o.model.vocab,
             " (--vocab, or the --init-from file's)");
}

// The report page a run rewrites beside --metrics X.jsonl (X.html, report/report_page.h),
// unless the metrics go to a device (no page then).
std::string report_page_of(const std::string& metrics) {
  struct stat st {};
  if (metrics.empty() || (::stat(metrics.c_str(), &st) == 0 && S_ISCHR(st.st_mode))) return "";
  return report_path_for(metrics);
}

// What no flag gives but a checkpoint holds, taken by a run resumed with --load: Llama 3.1's
// rope_scaling (only a Hugging Face config.json sets it), and a learned position table
// longer than --seq (a run begun with --init-from of a longer one keeps the whole table).
void take_checkpoint_tables(const std::string& dir, ModelConfig& model) {
  const ModelConfig c = loads_sharded(dir)
                            ? read_manifest(dir).model
                            : model_config_from_file(dir + "/model.safetensors", model);
  if (model.llama())
    model.rope_scaling = c.rope_scaling;
  else if (c.position_rows() > model.seq)
    model.positions = c.position_rows();
}

// Model shape from an init file: the file decides; conflicting flags are errors.
void take_init_shape(TrainOptions& o) {
  ModelConfig f = model_config_from_file(o.io.init_from, o.model);
  // A Hugging Face directory sets the whole shape (§9a): a model flag may only repeat it.
  if (is_hf_directory(o.io.init_from))
    require_flags_match_hf(o.model, o.model_flags_given, f, o.io.init_from + "/" + kHfConfigFile);
  // Learned positions bound --seq; RoPE (llama) does not.
  MT_REQUIRE(!o.seq_given || f.llama() || o.model.seq <= f.seq, "--seq ", o.model.seq,
             " is longer than the position table of ", o.io.init_from, " (", f.seq, " rows)");
  MT_REQUIRE(!o.vocab_given || o.model.vocab == f.vocab, "--vocab ", o.model.vocab,
             " differs from the ", f.vocab, " rows of ", f.token_table_name(), " in ",
             o.io.init_from);
  const int seq = o.seq_given ? o.model.seq : f.seq;
  o.model = f;
  if (!f.llama()) o.model.positions = f.seq;  // keep the whole table; the run uses seq rows
  o.model.seq = seq;
  o.vocab_given = true;
}

// --resume auto and a run folder given to --load become the one checkpoint directory read.
// Returns the lines that say which one; they are printed with the resume's other lines once
// every rule has passed, so a refused run prints its error and no "resuming from".
std::vector<std::string> resolve_load_dir(TrainOptions& o) {
  std::vector<std::string> lines;
  if (o.io.resume_auto) {
    // Validated with the rest below; the choice needs only --save.
    MT_REQUIRE(!o.io.save.empty(),
               "--resume auto looks for checkpoints under --save DIR: give --save");
    MT_REQUIRE(o.io.load.empty() && o.io.init_from.empty(),
               "--resume auto chooses the checkpoint itself: drop --load / --init-from");
    o.io.load = newest_checkpoint(o.io, warn);
    o.io.resumed = !o.io.load.empty();
    o.io.resume_auto = false;
    lines.push_back("--resume auto: " + (o.io.load.empty()
                                             ? std::string("no checkpoint yet, starting fresh")
                                             : "resuming from " + o.io.load));
  }
  // A run folder means its newest complete step, as for every command that reads one.
  if (!o.io.load.empty()) {
    const std::string given = o.io.load;
    o.io.load = resolve_checkpoint_dir("--load", given);
    if (o.io.load != given)
      lines.push_back("--load " + given + ": its newest checkpoint is " + o.io.load);
  }
  return lines;
}

// A resume takes the run's configuration from its checkpoint (cli/recorded_config.h), before
// anything is derived from the flags (the data, the vocabulary, the layout). Returns the
// lines that announce it, printed once every rule has passed (a refused run prints no
// line of a run). --init-from with --load is refused by the rules.
std::vector<std::string> take_checkpoint_config(TrainOptions& o) {
  if (o.io.load.empty() || !o.io.init_from.empty()) return {};
  return take_recorded_config(o, o.io.load, checkpoint_step(o.io.load));
}

}  // namespace

void resolve_train_options(TrainOptions& o) {
  // Every path, before any file is opened for its contents (a FIFO would block the open).
  resolve_save_path(o.io);
  std::vector<std::string> resumed = resolve_load_dir(o);
  for (std::string& line : take_checkpoint_config(o)) resumed.push_back(std::move(line));
  const bool val_given = !o.io.val_data.empty();
  const std::string data_given = o.io.data, val_data_given = o.io.val_data;
  // Data: the embedded corpus unless the user brings shards.
  if (o.io.data.empty()) {
    CorpusFiles c = prepare_fortunes_corpus(default_corpus_dir());
    o.io.data = c.train_path;
    o.io.tokenizer = TokenizerRecord{};  // byte-level: one token is one byte of text
    o.io.data_bytes_per_token = 1;
    if (o.io.val_data.empty()) {
      o.io.val_data = c.val_path;
      o.io.val_bytes_per_token = 1;
    }
  }
  resolve_dataset_inputs(o);  // --data DIR: a dataset of meshtrain prepare
  check_validation_inputs(o, val_given, data_given);
  o.io.report_page = report_page_of(o.io.metrics);
  const PathCheckReport paths = check_run_paths(o);
  if (!o.io.load.empty() && !paths.checkpoint_verified && !o.io.quiet)
    std::fprintf(stderr,
                 "meshtrain: warning: --load %s has no checksums (written before they were "
                 "recorded); its files cannot be verified\n",
                 o.io.load.c_str());
  check_weights_tokenizer(o);
  const int start = o.io.load.empty() ? 0 : checkpoint_step(o.io.load);
  if (!o.io.init_from.empty()) take_init_shape(o);
  if (!o.io.load.empty()) take_checkpoint_tables(o.io.load, o.model);
  if (!o.vocab_given) {
    // Byte-level by default; GPT-2-tokenized shards bring larger ids.
    std::vector<std::string> shards = o.io.data_shards;
    shards.push_back(o.io.data);
    static_assert(kMaxDataVocab == ModelConfig::kMaxVocab, "one largest vocabulary");
    o.model.vocab = vocab_of_shards(shards);
  }
  // The shape is final: the planner may choose the layout, then every rule of the options,
  // before any rank starts. The planner's line waits for the rules, as the resume's lines do:
  // a refused run prints its error alone.
  std::string planned;
  if (o.parallel.auto_layout)
    planned = plan::apply_auto_layout(o, plan::default_local_profile_path());
  validate_train_options(o, launcher_from_env());
  for (const std::string& w : option_warnings(o)) warn(w);
  check_token_stream(o, "--data", o.io.data, o.io.data_shards);
  if (o.optim.eval_every > 0) check_token_stream(o, "--val-data", o.io.val_data, o.io.val_shards);
  if (!o.io.load.empty()) check_load_fits(o.io.load, o.model);
  MT_REQUIRE(start <= o.optim.steps, "--load ", o.io.load, " is at step ", start,
             ", beyond --steps ", o.optim.steps);
  check_fault_spec(o, start);
  // Recorded in every checkpoint of the run, for its resumes.
  o.run_config = record_run_config(o, data_given, val_data_given);
  if (!o.io.quiet && !planned.empty()) std::printf("meshtrain: %s\n", planned.c_str());
  if (!o.io.quiet && launcher_from_env().rank == 0)
    for (const std::string& line : resumed) std::printf("meshtrain: %s\n", line.c_str());
}

std::string describe_train_layout(const TrainOptions& o) {
  validate_train_options(o, launcher_from_env());
  const ParallelOptions& p = o.parallel;
  return describe_process_layout(p.mesh(), o.engine.ranks_per_process);
}

namespace {

// Everything a run does before its ranks start: the options resolved and checked, the
// memory estimate, the --save lock (held until the run ends), the MFU denominator.
struct Launch {
  std::optional<SaveDirLock> save_lock;
  RunInfo info;
};

void prepare_launch(TrainOptions& o, Launch& launch) {
  const bool mpi = o.engine.backend == Backend::mpi;
  resolve_train_options(o);
  check_memory_fits(o);  // before any rank allocates: a refusal with figures, not an OOM kill
  // One writer per --save directory, held until the run ends (checkpoint/save_lock.h). Under
  // MPI only the process of global rank 0 writes checkpoints, so only it locks.
  if (!o.io.save.empty() && (!mpi || launcher_from_env().rank == 0)) {
    launch.save_lock.emplace(o.io.save);
    const StaleTemporaries stale = launch.save_lock->remove_stale_temporaries();
    for (const std::string& t : stale.removed)
      if (!o.io.quiet)
        std::printf("meshtrain: removed %s, left by an interrupted save\n", t.c_str());
    for (const std::string& why : stale.kept) warn(why);
  }
  if (!mpi || launcher_from_env().rank == 0) prepare_save_root(o.io);
  RunInfo& info = launch.info;
  info.t0 = now_seconds();
  info.write_report = [](const std::string& metrics, const std::string& page) {
    write_report_page({metrics}, page, "the report page");
  };
  // The denominator of MFU: the user's figure, else what one core can do, measured by the
  // one method of kernels/gemm_peak.h at its first read (train/mfu_peak.h), not now. Under
  // --precision bf16 the peak is the bf16 GEMM's, which the model's GEMMs run at.
  const bool bf16 = o.optim.precision == Precision::bf16;
  const PeakPrecision pp = bf16 ? PeakPrecision::bf16 : PeakPrecision::fp32;
  if (o.optim.peak_gflops > 0) {
    info.peak = MfuPeak::given(o.optim.peak_gflops);
  } else {
    info.peak = MfuPeak::on_first_read([pp] {
      const GemmPeak peak = measure_gemm_peak(pp, 1, kPeakSeconds);
      return MfuPeak::Figure{peak.gflops, describe_gemm_peak(pp, peak, 1)};
    });
  }
  if (bf16) info.gemm_isa = dense_bf16_isa(dense_bf16_default_path(o.optim.threads));
  if (o.model.experts > 0) info.expert_gemm_isa = grouped_gemm_isa(bf16);
}

}  // namespace

int run_training(TrainOptions o, int* argc, char*** argv) {
  const bool mpi = o.engine.backend == Backend::mpi;
  Launch launch;
  // Under mpirun every process prepares alone, and one may fail where another does not (its
  // host's files, its memory): the processes agree in MPI on who prints, and exit together
  // (comm/mpi/launch_agreement.h). Without MPI's help the error goes to cli_main's rule.
  try {
    prepare_launch(o, launch);
  } catch (const UsageError& e) {
    const LauncherInfo launcher = launcher_from_env();
    if (mpi && launcher.size > 1) end_launch_with_usage_error(argc, argv, e.what(), launcher.size);
    throw;
  }
  const RunInfo& info = launch.info;
  WorldOptions wo;
  wo.timeout_s = o.engine.timeout_s;
  wo.bind = o.engine.bind;
  wo.threads_per_rank = o.optim.threads;
  const char* check = std::getenv("MESHTRAIN_CHECK_COLLECTIVES");
  wo.check_collectives = check && std::string(check) == "1";
  auto body = [&](CommWorld& world) {
    // validate_train_options compared the layout with the launcher's size already; this
    // catches a launcher whose environment launcher_from_env() does not know.
    MT_REQUIRE(world.size() == o.parallel.world(), "the layout needs ",
               world_flags_text(o.parallel), " = ", o.parallel.world(), " ranks but the ",
               world.backend_name(), " world has ", world.size(),
               mpi ? " (set mpirun -np x --ranks-per-process to match)" : "");
    train_rank(o, world, info);
  };
  if (mpi) {
    if (o.engine.ranks_per_process > 1)
      run_hybrid(argc, argv, o.engine.ranks_per_process, wo, body);
    else
      run_mpi(argc, argv, wo, body);
    return 0;
  }
  const std::string first_load = o.io.load;
  const bool first_resumed = o.io.resumed;
  for (int restart = 0;; ++restart) {
    try {
      run_local(o.parallel.world(), wo, body);
      return 0;
    } catch (const RuntimeError& e) {
      if (restart >= o.engine.max_restarts) throw;
      // Every rank thread has been joined: the job is gone, its files closed. Come back
      // from the newest complete checkpoint (a background save in flight at the failure
      // never became one), or from where this run started when none was written yet.
      std::fprintf(stderr, "meshtrain: %s\n", e.what());
      const std::string from = newest_checkpoint(o.io, warn);
      o.io.load = from.empty() ? first_load : from;
      o.io.resumed = from.empty() ? first_resumed : true;
      std::fprintf(stderr, "meshtrain: restart %d of %d, from %s\n", restart + 1,
                   o.engine.max_restarts, o.io.load.empty() ? "the start" : o.io.load.c_str());
      // An injected fault (docs/contracts.md §8) models one crash: the restarted job runs
      // without it, as a relaunched process would not inherit the chaos test's setting.
      ::unsetenv("MESHTRAIN_FAULT");
    }
  }
}

}  // namespace mt
