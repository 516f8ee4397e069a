// The up-front memory estimate against the trainer's own memory record, layout by layout,
// and the refusal it drives.
#include "train/memory_estimate.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/arena.h"
#include "core/error.h"
#include "core/system_memory.h"
#include "core/timer.h"
#include "data/token_shard.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/matmul_bf16.h"
#include "model/expert_gemm.h"
#include "model/gpt.h"
#include "test_util/temp_dir.h"
#include "train/trainer.h"

namespace mt {
namespace {

using test_util::TempDir;

// A small model whose parameters and activations are both large enough to matter.
TrainOptions small_run(const TempDir& dir) {
  TrainOptions o;
  o.model.layers = 4;
  o.model.dim = 64;
  o.model.heads = 4;
  o.model.seq = 32;
  o.model.vocab = 256;
  o.optim.batch = 8;
  o.optim.steps = 1;
  o.io.quiet = true;
  o.io.data = dir / "train.bin";
  o.io.metrics = dir / "metrics.jsonl";
  std::vector<int> tokens(8 * 33 * 2);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int(i * 7919 % 256);
  write_token_shard(o.io.data, tokens);
  return o;
}

struct Measured {
  int64_t recorded = 0;  // max over ranks of params + grads + optimizer + activations
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0;
  int64_t bf16_weights = 0;  // --precision bf16 only
};

// Trains one step in this process and reads back the per-rank memory records.
Measured measure(const TrainOptions& o) {
  RunInfo info;
  info.peak = MfuPeak::given(1);
  info.t0 = now_seconds();
  run_local(o.parallel.world(), WorldOptions{}, [&](CommWorld& w) { train_rank(o, w, info); });
  std::ifstream in(o.io.metrics);
  Measured m;
  int records = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", "") != "memory") continue;
    ++records;
    const int64_t p = j["params_bytes"], g = j["grads_bytes"], opt = j["optimizer_bytes"],
                  a = j["activations_peak_bytes"];
    if (p + g + opt + a > m.recorded)
      m = {p + g + opt + a, p, g, opt, a, j.value("bf16_weight_bytes", int64_t(0))};
  }
  EXPECT_EQ(records, o.parallel.world());
  return m;
}

struct Layout {
  const char* name;
  void (*apply)(TrainOptions&);
};

double mib(int64_t b) {
  return double(b) / (1024 * 1024);
}

// Tolerance on the recorded total. The estimate mirrors the allocations and matched every
// layout here to the byte; only the optimizer's owned share (real elements / dp) is approximate.
constexpr double kTolerance = 0.05;

// The llama block (GQA 2:1, SwiGLU of 160, untied head): what the estimate knows of it comes
// from the same constructors (a dry run), so it must hold as exactly as the gpt2 block's.
void as_llama(TrainOptions& o) {
  o.model.arch = Arch::llama;
  o.model.kv_heads = 2;
  o.model.ffn_dim = 160;
}

TEST(MemoryEstimate, MatchesTheMemoryRecord) {
  const std::vector<Layout> layouts = {
      {"one worker", [](TrainOptions&) {}},
      {"dp 2 zero 0", [](TrainOptions& o) { o.parallel.dp = 2; }},
      {"dp 2 zero 1",
       [](TrainOptions& o) {
         o.parallel.dp = 2;
         o.parallel.zero = 1;
       }},
      {"dp 2 zero 2",
       [](TrainOptions& o) {
         o.parallel.dp = 2;
         o.parallel.zero = 2;
       }},
      {"dp 2 zero 2 bucket 0.1",
       [](TrainOptions& o) {
         o.parallel.dp = 2;
         o.parallel.zero = 2;
         o.parallel.bucket_mb = 0.1;
       }},
      {"dp 2 zero 3",
       [](TrainOptions& o) {
         o.parallel.dp = 2;
         o.parallel.zero = 3;
       }},
      {"tp 2", [](TrainOptions& o) { o.parallel.tp = 2; }},
      {"tp 2 sp",
       [](TrainOptions& o) {
         o.parallel.tp = 2;
         o.parallel.sequence_parallel = true;
       }},
      {"pp 2 m 4 1f1b",
       [](TrainOptions& o) {
         o.parallel.pp = 2;
         o.parallel.microbatches = 4;
       }},
      {"pp 2 m 4 gpipe",
       [](TrainOptions& o) {
         o.parallel.pp = 2;
         o.parallel.microbatches = 4;
         o.parallel.schedule = ScheduleKind::gpipe;
       }},
      {"pp 2 v 2 interleaved m 4",
       [](TrainOptions& o) {
         o.parallel.pp = 2;
         o.parallel.virtual_stages = 2;
         o.parallel.microbatches = 4;
         o.parallel.schedule = ScheduleKind::interleaved;
       }},
      {"pp 2 m 4 zb-h1 dp 2 zero 3",
       [](TrainOptions& o) {
         o.parallel.pp = 2;
         o.parallel.microbatches = 4;
         o.parallel.schedule = ScheduleKind::zb_h1;
         o.parallel.dp = 2;
         o.parallel.zero = 3;
       }},
      // DualPipe-V: stage 0 holds both ends (one wte) and 2p + 1 chunk slots at the peak.
      {"pp 2 m 4 dualpipev",
       [](TrainOptions& o) {
         o.parallel.pp = 2;
         o.parallel.microbatches = 4;
         o.parallel.schedule = ScheduleKind::dualpipev;
       }},
      {"pp 2 m 4 dualpipev dp 2 zero 3",
       [](TrainOptions& o) {
         o.parallel.pp = 2;
         o.parallel.microbatches = 4;
         o.parallel.schedule = ScheduleKind::dualpipev;
         o.parallel.dp = 2;
         o.parallel.zero = 3;
       }},
      {"experts 4 ep 2 dp 2",
       [](TrainOptions& o) {
         o.model.experts = 4;
         o.parallel.ep = 2;
         o.parallel.dp = 2;
       }},
      {"experts 4 ep 2 dp 2 overlap 3",
       [](TrainOptions& o) {
         o.model.experts = 4;
         o.parallel.ep = 2;
         o.parallel.dp = 2;
         o.parallel.moe_overlap_parts = 3;
       }},
      {"experts 4 ep 2 dp 2 zero 2",
       [](TrainOptions& o) {
         o.model.experts = 4;
         o.parallel.ep = 2;
         o.parallel.dp = 2;
         o.parallel.zero = 2;
       }},
      // --recompute: the slot shrinks, the recomputation scratch is workspace.
      {"recompute selective", [](TrainOptions& o) { o.optim.recompute = Recompute::selective; }},
      {"recompute full", [](TrainOptions& o) { o.optim.recompute = Recompute::full; }},
      {"tp 2 sp selective",
       [](TrainOptions& o) {
         o.parallel.tp = 2;
         o.parallel.sequence_parallel = true;
         o.optim.recompute = Recompute::selective;
       }},
      {"tp 2 sp full",
       [](TrainOptions& o) {
         o.parallel.tp = 2;
         o.parallel.sequence_parallel = true;
         o.optim.recompute = Recompute::full;
       }},
      {"pp 2 m 4 zb-h1 zero 3 sel",
       [](TrainOptions& o) {
         o.parallel.pp = 2;
         o.parallel.microbatches = 4;
         o.parallel.schedule = ScheduleKind::zb_h1;
         o.parallel.dp = 2;
         o.parallel.zero = 3;
         o.optim.recompute = Recompute::selective;
       }},
      {"pp 2 m 4 zb-h1 zero 3 full",
       [](TrainOptions& o) {
         o.parallel.pp = 2;
         o.parallel.microbatches = 4;
         o.parallel.schedule = ScheduleKind::zb_h1;
         o.parallel.dp = 2;
         o.parallel.zero = 3;
         o.optim.recompute = Recompute::full;
       }},
      {"experts 4 ep 2 dp 2 selective",
       [](TrainOptions& o) {
         o.model.experts = 4;
         o.parallel.ep = 2;
         o.parallel.dp = 2;
         o.optim.recompute = Recompute::selective;
       }},
      {"bf16", [](TrainOptions& o) { o.optim.precision = Precision::bf16; }},
      {"bf16 tp 2 sp selective",
       [](TrainOptions& o) {
         o.optim.precision = Precision::bf16;
         o.parallel.tp = 2;
         o.parallel.sequence_parallel = true;
         o.optim.recompute = Recompute::selective;
       }},
      {"bf16 full",
       [](TrainOptions& o) {
         o.optim.precision = Precision::bf16;
         o.optim.recompute = Recompute::full;
       }},
      {"bf16 pp 2 m 4 zb-h1 zero 3",
       [](TrainOptions& o) {
         o.optim.precision = Precision::bf16;
         o.parallel.pp = 2;
         o.parallel.microbatches = 4;
         o.parallel.schedule = ScheduleKind::zb_h1;
         o.parallel.dp = 2;
         o.parallel.zero = 3;
       }},
      {"bf16 experts 4 ep 2 dp 2",
       [](TrainOptions& o) {
         o.optim.precision = Precision::bf16;
         o.model.experts = 4;
         o.parallel.ep = 2;
         o.parallel.dp = 2;
       }},
      // One worker: an expert receives up to N = 256 rows, so its GEMMs run over chunks of
      // 256, 128 and 64 rows and a remainder, split or zero-padded (moe_layer.h).
      {"llama", [](TrainOptions& o) { as_llama(o); }},
      {"llama tp 2 sp full",
       [](TrainOptions& o) {
         as_llama(o);
         o.parallel.tp = 2;
         o.parallel.sequence_parallel = true;
         o.optim.recompute = Recompute::full;
       }},
      {"llama bf16 pp 2 m 4 zb-h1 zero 3",
       [](TrainOptions& o) {
         as_llama(o);
         o.optim.precision = Precision::bf16;
         o.parallel.pp = 2;
         o.parallel.microbatches = 4;
         o.parallel.schedule = ScheduleKind::zb_h1;
         o.parallel.dp = 2;
         o.parallel.zero = 3;
       }},
      {"bf16 experts 4 every 2 sel",
       [](TrainOptions& o) {
         o.optim.precision = Precision::bf16;
         o.model.experts = 4;
         o.model.moe_every = 2;
         o.optim.recompute = Recompute::selective;
       }},
  };
  std::printf("%-28s %10s %10s %8s  (MiB; estimate params/grads/opt/act/buffers)\n", "layout",
              "measured", "estimate", "error");
  for (const Layout& l : layouts) {
    TempDir dir;
    TrainOptions o = small_run(dir);
    l.apply(o);
    const MemoryEstimate e = estimate_rank_memory(o);
    const Measured m = measure(o);
    const double err = double(e.recorded() - m.recorded) / double(m.recorded);
    std::printf(
        "%-28s %10.3f %10.3f %+7.2f%%  (%.3f/%.3f/%.3f/%.3f/%.3f; measured %.3f/%.3f/%.3f/%.3f)\n",
        l.name, mib(m.recorded), mib(e.recorded()), 100 * err, mib(e.params_bytes),
        mib(e.grads_bytes), mib(e.optimizer_bytes), mib(e.activations_bytes), mib(e.buffers_bytes),
        mib(m.params), mib(m.grads), mib(m.optimizer), mib(m.activations));
    EXPECT_LE(std::abs(err), kTolerance) << l.name;
    // The activation slots are mirrored exactly.
    EXPECT_EQ(e.activations_bytes, m.activations) << l.name;
    if (o.parallel.pp == 1) {
      EXPECT_EQ(e.bf16_weight_bytes, m.bf16_weights) << l.name;
    }
  }
}

// --precision bf16 converts the experts' weights too: the record's bf16_weight_bytes is the
// dense model's plus, per MoE block, the local experts' c_fc and c_proj in place of the
// dense MLP's (its two packs, kernels/dense_gemm_bf16.h), and the AMX path's two packs of each
// expert matrix (model/expert_gemm.h).
TEST(MemoryEstimate, Bf16WeightBytesIncludeTheExperts) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU (needs AVX-512)";
  for (int ep : {1, 2}) {
    TempDir dense_dir, moe_dir;
    TrainOptions dense = small_run(dense_dir), moe = small_run(moe_dir);
    dense.optim.precision = moe.optim.precision = Precision::bf16;
    dense.parallel.dp = moe.parallel.dp = ep;
    moe.model.experts = 4, moe.model.moe_every = 2, moe.parallel.ep = ep;
    const int64_t C = moe.model.dim, H = moe.model.hidden(), local = 4 / ep;
    const int64_t moe_blocks = moe.model.layers / 2;
    const int64_t expert = int64_t(Bf16ExpertWeights::expert_bytes(int(C), int(H)) +
                                   Bf16ExpertWeights::expert_bytes(int(H), int(C)));
    const int64_t want =
        measure(dense).bf16_weights +
        moe_blocks * (local * expert - int64_t(DenseBf16Weight::bytes(int(C), int(H)) +
                                               DenseBf16Weight::bytes(int(H), int(C))));
    EXPECT_EQ(measure(moe).bf16_weights, want) << "ep " << ep;
  }
}

// One worker's workspace is what its model holds outside the slots (the chunks' shared
// workspaces and the MoE layers' own rows and padding, read off a model built for real)
// plus the data loader's batch. A hand-kept account once counted the bf16 experts'
// padding buffer twice.
TEST(MemoryEstimate, WorkspaceIsWhatTheModelHolds) {
  const std::vector<Layout> layouts = {
      {"fp32", [](TrainOptions&) {}},
      {"selective", [](TrainOptions& o) { o.optim.recompute = Recompute::selective; }},
      {"full", [](TrainOptions& o) { o.optim.recompute = Recompute::full; }},
      {"tp 2 sp",
       [](TrainOptions& o) {
         o.parallel.tp = 2;
         o.parallel.sequence_parallel = true;
       }},
      {"bf16", [](TrainOptions& o) { o.optim.precision = Precision::bf16; }},
      {"experts", [](TrainOptions& o) { o.model.experts = 4; }},
      {"bf16 experts every 2",
       [](TrainOptions& o) {
         o.optim.precision = Precision::bf16;
         o.model.experts = 4;
         o.model.moe_every = 2;
       }},
  };
  for (const Layout& l : layouts) {
    TempDir dir;
    TrainOptions o = small_run(dir);
    o.parallel.microbatches = 2;
    l.apply(o);
    const int b = o.optim.batch / o.parallel.microbatches;
    const bool sp = o.parallel.sequence_parallel;
    GPT model(o.model, GPT::whole_model(o.model), {0, o.parallel.tp, nullptr, sp}, b, {},
              o.optim.recompute, o.optim.precision);
    const int64_t batch = 2 * int64_t(o.optim.batch) * o.model.seq * int64_t(sizeof(int));
    // The arenas, the data loader's batch, the kernels' per-thread buffers (the bf16
    // attention core's, one set per thread) and the linears' weight-gradient scratch (once).
    const ChunkFootprint f = model.chunk(0).footprint();
    const int64_t per_thread = int64_t(o.optim.threads) * int64_t(f.thread_scratch_bytes);
    EXPECT_EQ(estimate_rank_memory(o).workspace_bytes, int64_t(f.workspace_floats * sizeof(float)) +
                                                           batch + per_thread +
                                                           int64_t(f.linear_scratch_bytes))
        << l.name;
  }
}

TEST(MemoryEstimate, ZeroStagesShrinkTheModelState) {
  TempDir dir;
  TrainOptions o = small_run(dir);
  o.parallel.dp = 4;
  int64_t prev = -1;
  for (int z = 0; z <= 3; ++z) {
    o.parallel.zero = z;
    const MemoryEstimate e = estimate_rank_memory(o);
    const int64_t state = e.params_bytes + e.grads_bytes + e.optimizer_bytes;
    if (prev >= 0) {
      EXPECT_LT(state, prev) << "zero " << z;
    }
    prev = state;
  }
}

TEST(MemoryEstimate, RefusalNamesFiguresAndARemedy) {
  TempDir dir;
  TrainOptions o = small_run(dir);
  o.parallel.dp = 4;
  const MemoryEstimate e = estimate_rank_memory(o);
  EXPECT_EQ(memory_refusal(o, e, 4, 4 * e.peak(), false), "");
  const std::string msg = memory_refusal(o, e, 4, 1000000, false);
  EXPECT_NE(msg.find("the run needs about "), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 ranks x "), std::string::npos) << msg;
  EXPECT_NE(msg.find("this machine has 0.95 MiB available"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--zero 2 or 3"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  // Activations dominate: the remedy is about them.
  o.parallel.dp = 1;
  o.optim.batch = 64;
  o.model.seq = 32;
  const std::string act = memory_refusal(o, estimate_rank_memory(o), 1, 1000000, true);
  EXPECT_NE(act.find("more --microbatches"), std::string::npos) << act;
  EXPECT_NE(act.find("MESHTRAIN_MEMORY_LIMIT_BYTES allows"), std::string::npos) << act;
}

TEST(MemoryEstimate, CheckThrowsUsageErrorUnderTheLimit) {
  TempDir dir;
  TrainOptions o = small_run(dir);
  o.parallel.dp = 2;
  o.parallel.zero = 1;
  ::setenv("MESHTRAIN_MEMORY_LIMIT_BYTES", "1000000", 1);
  // Process CPU time: the refusal must come from arithmetic, not from allocating and
  // failing, and a preempted wall clock under CI load says nothing about that.
  const std::clock_t t0 = std::clock();
  std::string what;
  try {
    check_memory_fits(o);
  } catch (const UsageError& e) {
    what = e.what();
  }
  const double s = double(std::clock() - t0) / CLOCKS_PER_SEC;
  EXPECT_NE(what.find("2 ranks x "), std::string::npos) << what;
  EXPECT_NE(what.find("try --zero 2 or 3"), std::string::npos) << what;
  EXPECT_LT(s, 0.1);
  ::setenv("MESHTRAIN_MEMORY_LIMIT_BYTES", "1000000000000", 1);
  EXPECT_NO_THROW(check_memory_fits(o));
  ::setenv("MESHTRAIN_MEMORY_LIMIT_BYTES", "lots", 1);
  EXPECT_THROW(check_memory_fits(o), UsageError);
  ::unsetenv("MESHTRAIN_MEMORY_LIMIT_BYTES");
  // The machine's own figure: a small run fits.
  EXPECT_GT(available_memory_bytes(), 0);
  EXPECT_NO_THROW(check_memory_fits(o));
}

TEST(MemoryEstimate, MpiCountsTheProcessesOnThisHost) {
  TempDir dir;
  TrainOptions o = small_run(dir);
  o.parallel.dp = 8;
  EXPECT_EQ(ranks_on_this_host(o), 8);
  o.engine.backend = Backend::mpi;
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  ::unsetenv("MPI_LOCALNRANKS");
  EXPECT_EQ(ranks_on_this_host(o), 1);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  EXPECT_EQ(ranks_on_this_host(o), 4);
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}

// An allocation that fails anyway says so, with the size where it is known.
TEST(MemoryEstimate, OutOfMemoryMessages) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan aborts an impossible allocation instead of failing it";
#endif
  try {
    Arena huge(size_t(1) << 60);
    FAIL() << "allocated 4 EiB";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory: cannot allocate 4294967296.00 GiB"),
              std::string::npos)
        << e.what();
  }
  try {
    run_local(2, WorldOptions{}, [](CommWorld& w) {
      if (w.rank() == 1) throw std::bad_alloc();
    });
    FAIL() << "no failure";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 1: out of memory (std::bad_alloc)");
  }
}

}  // namespace
}  // namespace mt
