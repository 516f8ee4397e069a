// Everything `meshtrain train` can be told, grouped as in docs/contracts.md §5. The CLI fills
// it from a TOML file and flags; the trainer only reads it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "core/core_binding.h"
#include "data/data_order.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "model/context_parallel_shard.h"
#include "model/precision.h"
#include "model/recompute.h"
#include "parallel/data_parallel/replica_sync.h"
#include "parallel/mesh.h"
#include "schedule/schedule_kind.h"
#include "train/checkpoint/checkpoint_format.h"
#include "train/lr_schedule.h"

namespace mt {

struct ParallelOptions {
  int dp = 1, tp = 1, pp = 1, ep = 1;
  // Parts of a microbatch whose expert all-to-alls overlap the experts of another part
  // (model/moe_parts.h, docs/moe.md "Overlapped all-to-all"); 1: not overlapped.
  int moe_overlap_parts = 1;
  int cp = 1;                     // context parallelism: each sequence split over cp ranks
  CpComm cp_comm = CpComm::ring;  // ring | allgather (docs/context_parallel.md)
  int microbatches = 1;
  // Its name (schedule_name) is the one the user gave, for messages and records.
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int virtual_stages = 1;
  std::string stage_layers;  // --stage-layers 3,4,4,3; empty: partition_layers()
  int zero = 0;
  bool sequence_parallel = false;
  double bucket_mb = 25;  // gradient bucket size for the data-parallel reducer
  // --auto-layout --ranks N: the planner (plan/auto_layout.h) sets the layout knobs not in
  // `fixed` (the flag names the user gave, filled by the CLI) before validation.
  bool auto_layout = false;
  int ranks = 0;
  std::vector<std::string> fixed;
  // every-step | local:H | diloco:H (parallel/data_parallel/replica_sync.h; dp_sync_text)
  DpSync dp_sync;
  double outer_lr = 0.7, outer_momentum = 0.9;  // diloco's outer Nesterov step
  int world() const { return dp * cp * tp * pp; }
  MeshShape mesh() const { return MeshShape{pp, dp, tp, ep, cp}; }
};

struct OptimOptions {
  int steps = 100;
  int batch = 8;  // global batch, in sequences
  double lr = 1e-3, min_lr = 1e-4;
  int warmup = 0;
  LrKind lr_schedule = LrKind::cosine;
  double weight_decay = 0.1, grad_clip = 1.0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  uint64_t seed = 1337;
  int threads = 1;  // compute threads per rank
  // Per-thread sgemm peak in GFLOP/s, the denominator of mfu; 0: measured at start-up.
  double peak_gflops = 0;
  int eval_every = 0;
  int eval_batches = 4;
  Recompute recompute = Recompute::none;  // model/recompute.h
  Precision precision = Precision::fp32;  // model/precision.h, docs/precision.md
};

// --progress: how rank 0 shows the steps (train/progress.h).
enum class ProgressMode { automatic, bar, lines, none };

struct IoOptions {
  std::string config;  // the --config file, if any (an input like the others)
  std::string data, val_data;
  DataOrder data_order = DataOrder::shuffled;  // of the training samples (validation: in order)
  std::string init_from, export_path;
  std::string export_hf;                     // --export-hf DIR: a Hugging Face Llama directory
  Precision export_dtype = Precision::fp32;  // of --export's and --export-hf's weights
  std::string save, load;
  int save_every = 0;
  std::string metrics, trace;
  int sample_tokens = 0;  // print a sample of this many tokens at the end (0: none)
  std::string sample_prompt = "\n";
  bool quiet = false;  // no progress or other lines; the final summary line still
  ProgressMode progress = ProgressMode::automatic;
  int log_every = 1;  // --progress lines: a line every N steps (and at the last)
  // Set from a dataset directory (--data DIR, meshtrain prepare; train/dataset_inputs.h):
  // every shard of each split, read as one stream, and the bytes of text one token stands
  // for (0: unknown, e.g. shards made elsewhere).
  std::vector<std::string> data_shards, val_shards;
  double data_bytes_per_token = 0, val_bytes_per_token = 0;
  // What the data's ids mean; none: unknown (shards made elsewhere, ids above 255).
  std::optional<TokenizerRecord> tokenizer;
  int report_every = 100;  // the report page beside --metrics, every N steps (0: at the end)
  // Where that page goes (metrics.jsonl -> metrics.html), set by the CLI before the paths are
  // checked; empty: no page (no --metrics, or metrics to a device).
  std::string report_page;
  // Checkpoints at scale (train/checkpoint/checkpoint_format.h, docs/checkpoints.md).
  CheckpointFormat checkpoint_format = CheckpointFormat::global;
  int keep_checkpoints = 0;  // sharded: keep the K newest complete checkpoints (0: all)
  bool resume_auto = false;  // --resume auto: --load the newest valid checkpoint under --save
  // --load was chosen by --resume auto or a --max-restarts restart: the run of that
  // checkpoint continues (its earlier checkpoints count for --keep-checkpoints).
  bool resumed = false;
  bool save_sync = false;  // sharded: write on the training thread (no background writer)
};

struct EngineOptions {
  Backend backend = Backend::local;
  double timeout_s = 300;
  int max_restarts = 0;  // local backend: restart the job from its newest checkpoint
  // Ranks each MPI process runs as threads (--backend mpi; 1: one rank per process). K > 1 is
  // the hybrid world (comm/hybrid/): process p runs world ranks p*K .. p*K+K-1.
  int ranks_per_process = 1;
  // --backend local: the cores each rank's compute threads may use (core/core_binding.h).
  CoreBinding bind = CoreBinding::automatic;
  // `meshtrain bench step --breakdown` (no train flag): rank 0 prints where the step's time
  // went, phase by phase (train/step_breakdown.h).
  bool breakdown = false;
};

struct TrainOptions {
  ModelConfig model;
  ParallelOptions parallel;
  OptimOptions optim;
  IoOptions io;
  EngineOptions engine;
  bool vocab_given = false;  // --vocab set explicitly (else taken from data / init file)
  bool seq_given = false;
  // The model flags the user set (names without dashes, on the command line or in the config
  // file), of hf_shape_flags(): an --init-from directory's config.json must not contradict them.
  std::vector<std::string> model_flags_given;
  // Every flag the user set (names without dashes, command line or config file): a resumed
  // run takes the others from its checkpoint's record (train/resume_changes.h).
  std::vector<std::string> flags_given;
  // The run's resolved configuration ({section: {flag: value}} of the model, layout,
  // training and data flags), set before any rank starts and recorded in every checkpoint
  // (docs/checkpoints.md, "A resume remembers its run"); null: not recorded.
  nlohmann::json run_config;
};

}  // namespace mt
