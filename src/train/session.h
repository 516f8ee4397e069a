// Everything one rank needs to train, built once and owned in one place: the rank's place
// in the mesh and its communicators, the data loaders, the model (this rank's chunks and
// shards), data parallelism, the optimizer, the microbatch runner (plain loop or pipeline),
// the routing metrics and, when a run writes files, the global view. train_step (step.h)
// runs one optimizer step on it; checkpoint/checkpointer.h saves and restores it, and
// session_io.h writes its export and sample.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/world.h"
#include "data/data_loader.h"
#include "model/gpt.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/data_parallel/replica_sync.h"
#include "parallel/expert_parallel/token_dispatcher.h"
#include "parallel/microbatch_runner.h"
#include "parallel/parallel_context.h"
#include "train/bf16_copy_writer.h"
#include "train/global_view.h"
#include "train/lr_schedule.h"
#include "train/mfu_peak.h"
#include "train/moe_metrics.h"
#include "train/optimizer.h"
#include "train/options.h"

namespace mt {

struct RunInfo {
  // The GEMM peak per thread, for mfu (under --precision bf16: the bf16 GEMM peak, the rate
  // the model's GEMMs can reach), measured at its first read (train/mfu_peak.h); shared by
  // the rank threads of one process. Null: no peak (mfu 0).
  std::shared_ptr<const MfuPeak> peak;
  std::string gemm_isa;  // --precision bf16: oneDNN's bf16 matmul implementation
  // With experts: the grouped GEMM path their GEMMs run (kernels/grouped_gemm.h,
  // grouped_gemm_isa: "avx512", "amx", "avx512-bf16", "loop:...", "portable").
  std::string expert_gemm_isa;
  double t0 = 0;  // job start (steady clock), for traces
  // Draws the report page `page` from the metrics file `metrics` (rank 0, every
  // --report-every steps and at the end). Set by the CLI: train/ does not link report/, so
  // that drawing a chart needs no model, kernels or communication. Empty: no page.
  std::function<void(const std::string& metrics, const std::string& page)> write_report;
};

// Members are declared in build order: each one is built from those above it, and they
// are destroyed in reverse (the runner and data parallelism before the model they hook).
class Session {
 public:
  // Collective over world (communicator groups, global view). The options must have passed
  // validate_train_options; what this constructor still checks is data against the model
  // (token ids within the vocabulary).
  Session(const TrainOptions& opts, CommWorld& world, const RunInfo& info);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const TrainOptions opts;
  const RunInfo info;
  ParallelContext ctx;
  DataLoader train;
  std::optional<DataLoader> val;
  std::unique_ptr<TokenDispatcher> dispatcher;  // expert parallelism: one exchange per rank
  GPT model;
  DataParallel dp;
  std::vector<MoeLayer*> moe;  // this rank's MoE layers, table order
  MoeMetrics moe_metrics;
  AdamW opt;
  Bf16CopyWriter bf16_copies;  // --precision bf16: the optimizer writes the weight copies
  std::unique_ptr<MicrobatchRunner> runner;
  LrSchedule lr;
  ReplicaSync replica_sync;  // --dp-sync
  // The whole model gathered to rank 0, for --save, --export and the sample.
  std::optional<GlobalView> view;
  int start_step = 0;  // updates already done (a --load resumes after them)

  bool lead() const { return ctx.rank == 0; }
  bool pipelined() const { return opts.parallel.pp > 1; }
  bool sequence_parallel() const { return opts.parallel.sequence_parallel && opts.parallel.tp > 1; }
  // The tensor-parallel group, null without tensor parallelism.
  Communicator* tp() const { return opts.parallel.tp > 1 ? ctx.tp.get() : nullptr; }
  // Model FLOPs per second the world could do at its GEMM peak (0 without one). The first
  // call may measure it (train/mfu_peak.h).
  double peak_flops() const;
};

std::unique_ptr<Session> build_session(const TrainOptions& opts, CommWorld& world,
                                       const RunInfo& info);

}  // namespace mt
