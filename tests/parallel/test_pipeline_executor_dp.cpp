// The pipeline executor composed with data parallelism (ZeRO 0) the way the trainer does
// it (docs/pipeline_trainer_integration.patch): DataParallel owns the gradients and reduces
// after the last microbatch's backward, the tied wte gradient is summed between the first
// and the last stage afterwards, the loss and the squared gradient norm are summed over
// the stages (wte counted once). All must match one worker on the same global batch.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/reduce.h"
#include "model/gpt.h"
#include "parallel/data_parallel/data_parallel.h"
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
};

void check_dp_pp(int dp_size, int pp, const std::string& schedule, int m) {
  SCOPED_TRACE(str("dp ", dp_size, " pp ", pp, " ", schedule, " m ", m));
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
    GPT model(cfg, stage_chunk_specs(resolve_stage_layers(cfg, pp, 1, ""), pp, stage),
              TensorParallelShard{}, kB);
    model.init(3);
    DataParallel dp(model, ctx.dp, 0, /*bucket_mb=*/0.001);
    std::vector<ModelChunk*> chunks{&model.chunk(0)};
    PipelineExecutor ex(make_schedule(schedule, pp, m, 1), stage, chunks, *ctx.pp,
                        PipelineShape{kB, T, cfg.dim});
    ex.set_before_weight_grads([&](int mb, int) { dp.begin_microbatch(mb == m - 1); });
    dp.begin_step();
    const size_t slice = size_t(ctx.coord.dp) * m * kB * T;
    const PipelineStepStats st = ex.run(tokens.data() + slice, targets.data() + slice, dloss);
    dp.finish_gradients();
    const bool tied = ctx.first_stage() || ctx.last_stage();
    size_t n = 0;
    float* g = tied ? tied_embedding_grad(dp, model.table(), &n) : nullptr;
    if (tied) sum_tied_embedding_grad(*ctx.pp, g, n);
    Result& r = out[size_t(w.rank())];
    r.loss = sum_in_rank_order(*ctx.pp, dp.sum_over(st.loss_sum) / (double(seqs) * T));
    double sq = dp.grad_sum_squares(nullptr);
    if (tied && ctx.last_stage()) sq -= sum_squares(g, n);
    r.norm_sq = sum_in_rank_order(*ctx.pp, sq);
    // Back from the flat layout to the table layout, then by name.
    std::vector<float> table_grads(model.table().total());
    for (const UpdatePiece& p : dp.update_pieces())
      for (size_t i = 0; i < p.n; ++i)
        table_grads[p.table_off + i] = dp.grad_storage()[p.grad_off + i];
    for (const ParamInfo& info : model.table().entries())
      r.grads[info.name] = std::vector<float>(table_grads.begin() + long(info.offset),
                                              table_grads.begin() + long(info.offset + info.numel));
  });

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
  }
}

TEST(PipelineWithDataParallel, MatchesOneWorker) {
  check_dp_pp(2, 2, "1f1b", 2);
  check_dp_pp(2, 2, "gpipe", 4);
  check_dp_pp(1, 4, "1f1b", 4);  // middle stages hold neither embedding nor head
  check_dp_pp(1, 2, "zb-h1", 4);
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
