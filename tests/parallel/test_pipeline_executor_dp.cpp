// The pipeline executor composed with data parallelism the way the trainer does it:
// DataParallel owns the gradients (ZeRO 0-3, one or several chunks per rank) and reduces
// after each chunk's last microbatch, the tied wte gradient is summed between the first
// and the last stage afterwards (read in full from the ZeRO shards, written back into
// them), the loss and the squared gradient norm are summed over the stages (wte counted
// once). All must match one worker on the same global batch, and after one AdamW update
// the two stages' wte copies must be bitwise identical.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/adamw.h"
#include "kernels/reduce.h"
#include "model/gpt.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/grad_norm.h"
#include "parallel/parallel_context.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "parallel/pipeline/stage_chunks.h"
#include "parallel/pipeline/tied_embedding.h"

namespace mt {
namespace {

constexpr int kB = 2;

struct Result {
  double loss = 0, norm_sq = 0;
  std::map<std::string, std::vector<float>> grads;
  std::vector<float> wte_after_update;  // tied stages only
};

struct Layout {
  int dp = 1, pp = 2;
  std::string schedule = "1f1b";
  int m = 2, zero = 0, v = 1;
};

void check_dp_pp(const Layout& l) {
  const int dp_size = l.dp, pp = l.pp, m = l.m;
  SCOPED_TRACE(
      str("dp ", dp_size, " pp ", pp, " ", l.schedule, " m ", m, " zero ", l.zero, " v ", l.v));
  ModelConfig cfg;
  cfg.layers = 4, cfg.dim = 16, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 19;
  const int T = cfg.seq, seqs = dp_size * m * kB;
  std::vector<int> tokens, targets;
  for (int i = 0; i < seqs * T; ++i) {
    tokens.push_back(int(uniform01(5, 1, i) * cfg.vocab));
    targets.push_back(int(uniform01(5, 2, i) * cfg.vocab));
  }
  const float dloss = float(1.0 / (double(seqs) * T));

  // One worker: every microbatch of every replica, in order.
  set_compute_threads(1);
  GPT ref(cfg, GPT::whole_model(cfg), TensorParallelShard{}, kB);
  ref.init(3);
  ref.zero_grads();
  double ref_loss = 0;
  for (int j = 0; j < dp_size * m; ++j)
    ref_loss +=
        ref.train_microbatch(tokens.data() + j * kB * T, targets.data() + j * kB * T, kB, T, dloss);
  ref_loss /= double(seqs) * T;
  const double ref_norm_sq = sum_squares(ref.grads().data(), ref.table().total());

  std::vector<Result> out(size_t(dp_size) * pp);
  run_local(dp_size * pp, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{pp, dp_size, 1, 1});
    const int stage = ctx.coord.pp;
    GPT model(cfg, stage_chunk_specs(resolve_stage_layers(cfg, pp, l.v, ""), pp, stage),
              TensorParallelShard{}, kB);
    model.init(3);
    // A small bucket: several buckets per chunk, so reductions overlap backward.
    DataParallel dp(model, {.dp = ctx.dp, .zero = l.zero, .bucket_mb = 0.001});
    std::vector<ModelChunk*> chunks;
    for (int c = 0; c < model.num_chunks(); ++c) chunks.push_back(&model.chunk(c));
    PipelineExecutor ex(make_schedule(l.schedule, pp, m, l.v), stage, chunks, *ctx.pp,
                        PipelineShape{kB, T, cfg.dim});
    dp.begin_step(m);
    const size_t slice = size_t(ctx.coord.dp) * m * kB * T;
    const PipelineStepStats st = ex.run(tokens.data() + slice, targets.data() + slice, dloss);
    dp.finish_gradients();
    const bool tied = ctx.first_stage() || ctx.last_stage();
    std::vector<float> wte;
    if (tied) sum_tied_embedding_grad(*ctx.pp, dp, model.table(), wte);
    Result& r = out[size_t(w.rank())];
    r.loss = sum_in_rank_order(*ctx.pp, dp.sum_over(st.loss_sum) / (double(seqs) * T));
    r.norm_sq =
        global_grad_sum_squares(dp, {nullptr, ctx.pp.get()}, tied_embedding_copy(*ctx.pp, wte));
    // Every tensor's reduced gradient, by name (collective over dp, in table order).
    for (const ParamInfo& info : model.table().entries()) {
      std::vector<float> g(info.numel);
      dp.read_grad(info, g.data());
      r.grads[info.name] = std::move(g);
    }
    // One clipped AdamW update as the trainer makes it: the tied copies must stay equal.
    dp.scale_grads(0.5f);
    std::vector<float> m1(model.table().total()), m2(model.table().total());
    size_t off = 0;
    for (const UpdatePiece& p : dp.update_pieces()) {
      adamw_update(dp.param_storage() + p.param_off, dp.grad_storage() + p.grad_off,
                   m1.data() + off, m2.data() + off, p.n,
                   AdamWParams{1e-2, 0.9, 0.95, 1e-8, p.decay ? 0.1 : 0.0, 1});
      off += p.n;
    }
    dp.after_optimizer();
    std::vector<float> params(model.table().total());
    dp.gather_params(params.data());
    if (tied) {
      const ParamInfo& info = model.table().at("transformer.wte.weight");
      r.wte_after_update.assign(params.begin() + long(info.offset),
                                params.begin() + long(info.offset + info.numel));
    }
  });

  const std::vector<float>& wte0 = out[0].wte_after_update;
  ASSERT_FALSE(wte0.empty());
  for (size_t rank = 0; rank < out.size(); ++rank) {
    const Result& r = out[rank];
    EXPECT_NEAR(r.loss, ref_loss, 1e-5 * ref_loss) << "rank " << rank;
    EXPECT_NEAR(r.norm_sq, ref_norm_sq, 1e-5 * ref_norm_sq) << "rank " << rank;
    for (const auto& [name, g] : r.grads) {
      const ParamInfo& info = ref.table().at(name);
      const float* want = ref.grads().data() + info.offset;
      double diff = 0, scale = 1e-12;
      for (size_t i = 0; i < g.size(); ++i) {
        diff = std::max(diff, std::fabs(double(g[i]) - want[i]));
        scale = std::max(scale, std::fabs(double(want[i])));
      }
      EXPECT_LE(diff / scale, 1e-5) << name << " on rank " << rank;
    }
    if (!r.wte_after_update.empty()) {
      EXPECT_TRUE(r.wte_after_update == wte0) << "wte copies differ on rank " << rank;
    }
  }
}

TEST(PipelineWithDataParallel, MatchesOneWorker) {
  check_dp_pp({2, 2, "1f1b", 2});
  check_dp_pp({2, 2, "gpipe", 4});
  check_dp_pp({1, 4, "1f1b", 4});  // middle stages hold neither embedding nor head
  check_dp_pp({1, 2, "zb-h1", 4});
}

// ZeRO shards the reduced gradients, and the two tied stages shard them differently.
TEST(PipelineWithDataParallel, ZeroStages) {
  check_dp_pp({2, 2, "1f1b", 2, /*zero=*/1});
  check_dp_pp({2, 2, "gpipe", 4, /*zero=*/2});
  check_dp_pp({2, 4, "1f1b", 4, /*zero=*/1});
  check_dp_pp({2, 2, "1f1b", 4, /*zero=*/3});
}

// The split backward drives the bucketed reduction from its deferred W passes.
TEST(PipelineWithDataParallel, ZeroBubbleWithDataParallel) {
  check_dp_pp({2, 2, "zb-h1", 4});
  check_dp_pp({2, 2, "zb-h1", 2, /*zero=*/1});
  check_dp_pp({2, 4, "zb-h1", 4, /*zero=*/2});
  check_dp_pp({2, 2, "zb-h1", 4, /*zero=*/3});
}

// Several chunks per rank: "last microbatch" per chunk, buckets never across chunks.
TEST(PipelineWithDataParallel, InterleavedChunks) {
  check_dp_pp({1, 2, "interleaved", 2, 0, /*v=*/2});
  check_dp_pp({2, 2, "interleaved", 4, 0, /*v=*/2});
  check_dp_pp({2, 2, "interleaved", 2, /*zero=*/1, /*v=*/2});
  check_dp_pp({1, 4, "interleaved", 4, 0, /*v=*/2});  // 8 chunks of 4 layers: empty chunks
}

// ZeRO 2-3 with several chunks per rank: each chunk's edge bucket takes the shared edge
// buffer in turn (stage 2), and each chunk with an edge unit has its own gather buffer
// while the block buffers serve every chunk (stage 3).
TEST(PipelineWithDataParallel, InterleavedChunksZero23) {
  for (int zero : {2, 3}) {
    check_dp_pp({2, 2, "interleaved", 2, zero, /*v=*/2});
    check_dp_pp({2, 2, "interleaved", 4, zero, /*v=*/2});
    check_dp_pp({2, 4, "interleaved", 4, zero, /*v=*/2});  // empty chunks, middle stages
  }
}

TEST(PipelineStage, TheoreticalBubbleAndSums) {
  EXPECT_NEAR(theoretical_bubble(make_schedule("1f1b", 4, 8, 1)), 3.0 / 11, 1e-12);
  EXPECT_NEAR(theoretical_bubble(make_schedule("interleaved", 4, 8, 2)), 3.0 / 19, 1e-12);
  EXPECT_NEAR(theoretical_bubble(make_schedule("zb-h1", 4, 8, 1)), 1.0 / 9, 1e-12);
  run_local(3, WorldOptions{}, [](CommWorld& w) {
    const double x = 0.1 * (w.rank() + 1);
    EXPECT_EQ(sum_in_rank_order(*w.world(), x), (0.1 + 0.2) + 0.30000000000000004);
  });
}

}  // namespace
}  // namespace mt
