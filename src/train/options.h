// Everything `meshtrain train` can be told, grouped as in CONTRACTS.md §5. The CLI fills
// it from a TOML file and flags; the trainer only reads it.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"

namespace mt {

struct ParallelOptions {
  int dp = 1, tp = 1, pp = 1, ep = 1;
  int microbatches = 1;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  std::string stage_layers;  // --stage-layers 3,4,4,3; empty: partition_layers()
  int zero = 0;
  bool sequence_parallel = false;
  double bucket_mb = 25;  // gradient bucket size for the data-parallel reducer
  // every-step | local:H | diloco:H (parallel/data_parallel/replica_sync.h)
  std::string dp_sync = "every-step";
  double outer_lr = 0.7, outer_momentum = 0.9;  // diloco's outer Nesterov step
  int world() const { return dp * tp * pp; }
};

struct OptimOptions {
  int steps = 100;
  int batch = 8;  // global batch, in sequences
  double lr = 1e-3, min_lr = 1e-4;
  int warmup = 0;
  std::string lr_schedule = "cosine";
  double weight_decay = 0.1, grad_clip = 1.0;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  uint64_t seed = 1337;
  int threads = 1;  // compute threads per rank
  // Per-thread sgemm peak in GFLOP/s, the denominator of mfu; 0: measured at start-up.
  double peak_gflops = 0;
  int eval_every = 0;
  int eval_batches = 4;
  std::string recompute = "none";  // none|selective|full (model/recompute.h)
};

struct IoOptions {
  std::string config;  // the --config file, if any (an input like the others)
  std::string data, val_data;
  std::string init_from, export_path;
  std::string save, load;
  int save_every = 0;
  std::string metrics, trace;
  int sample_tokens = 0;  // print a sample of this many tokens at the end (0: none)
  std::string sample_prompt = "\n";
  bool quiet = false;
};

struct EngineOptions {
  std::string backend = "local";
  double timeout_s = 300;
  // Ranks each MPI process runs as threads (--backend mpi; 1: one rank per process). K > 1 is
  // the hybrid world (comm/hybrid/): process p runs world ranks p*K .. p*K+K-1.
  int ranks_per_process = 1;
};

struct TrainOptions {
  ModelConfig model;
  ParallelOptions parallel;
  OptimOptions optim;
  IoOptions io;
  EngineOptions engine;
  bool vocab_given = false;  // --vocab set explicitly (else taken from data / init file)
  bool seq_given = false;
};

}  // namespace mt
