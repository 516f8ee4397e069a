// DataParallel counts each unit's backward passes itself: begin_step(m) announces m passes
// per chunk, stages 0-1 reduce after the m-th, forward-only passes (evaluation) do not
// count, and a step that runs more or fewer passes than announced fails loudly instead of
// reducing partial gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "model/gpt.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/parallel_context.h"
#include "test_util/rel_diff.h"

namespace mt {
namespace {

constexpr int kB = 2, kDp = 2, kM = 2;

ModelConfig config() {
  ModelConfig cfg;
  cfg.layers = 2, cfg.dim = 16, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 19;
  return cfg;
}

struct Batch {
  std::vector<int> tokens, targets;
  const int* tok(int mb) const { return tokens.data() + size_t(mb) * kB * config().seq; }
  const int* tgt(int mb) const { return targets.data() + size_t(mb) * kB * config().seq; }
};

Batch batch(int microbatches) {
  const ModelConfig cfg = config();
  Batch b;
  for (int i = 0; i < microbatches * kB * cfg.seq; ++i) {
    b.tokens.push_back(int(uniform01(7, 1, i) * cfg.vocab));
    b.targets.push_back(int(uniform01(7, 2, i) * cfg.vocab));
  }
  return b;
}

// Each dp rank runs kM microbatches with an evaluation forward between them; the reduced
// gradients must match one worker running all kDp * kM microbatches.
void check_counts_passes(int zero) {
  SCOPED_TRACE(str("zero ", zero));
  const ModelConfig cfg = config();
  const int T = cfg.seq;
  const Batch all = batch(kDp * kM);
  const float dloss = float(1.0 / (double(kDp * kM * kB) * T));
  set_compute_threads(1);
  GPT ref(cfg, GPT::whole_model(cfg), TensorParallelShard{}, kB);
  ref.init(3);
  ref.zero_grads();
  for (int j = 0; j < kDp * kM; ++j) ref.train_microbatch(all.tok(j), all.tgt(j), kB, T, dloss);

  run_local(kDp, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, kDp, 1, 1});
    GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, kB);
    model.init(3);
    DataParallel dp(model, {.dp = ctx.dp, .zero = zero, .bucket_mb = 0.001});
    dp.begin_step(kM);
    const int first = ctx.coord.dp * kM;
    for (int j = 0; j < kM; ++j) {
      model.train_microbatch(all.tok(first + j), all.tgt(first + j), kB, T, dloss);
      model.eval_microbatch(all.tok(0), all.tgt(0), kB, T);  // must not count as a pass
    }
    dp.finish_gradients();
    for (const ParamInfo& info : model.table().entries()) {
      std::vector<float> g(info.numel);
      dp.read_grad(info, g.data());
      const float* want = ref.grads().data() + info.offset;
      EXPECT_LE(test_util::max_rel_diff(g.data(), want, g.size()), 1e-5)
          << info.name << " on rank " << w.rank();
    }
    dp.release_params();
  });
}

TEST(DataParallelSteps, CountsBackwardPassesPerStep) {
  for (int zero : {0, 1, 2, 3}) check_counts_passes(zero);
}

TEST(DataParallelSteps, RefusesPassesBeyondTheAnnouncedCount) {
  const ModelConfig cfg = config();
  const Batch b = batch(1);
  // A pass that throws leaves the model's activation slot taken: a fresh model each time.
  for (bool announced : {false, true}) {
    run_local(kDp, WorldOptions{}, [&](CommWorld& w) {
      set_compute_threads(1);
      ParallelContext ctx = make_parallel_context(w, MeshShape{1, kDp, 1, 1});
      GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, kB);
      model.init(3);
      DataParallel dp(model, {.dp = ctx.dp, .zero = 1});
      if (announced) {
        dp.begin_step(1);
        model.train_microbatch(b.tok(0), b.tgt(0), kB, cfg.seq, 1e-3f);
      }
      // Without begin_step no pass was announced; with it, one was and it has run.
      EXPECT_THROW(model.train_microbatch(b.tok(0), b.tgt(0), kB, cfg.seq, 1e-3f), RuntimeError);
    });
  }
}

TEST(DataParallelSteps, RefusesFewerPassesThanAnnounced) {
  const ModelConfig cfg = config();
  const Batch b = batch(1);
  run_local(kDp, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, kDp, 1, 1});
    GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, kB);
    model.init(3);
    DataParallel dp(model, {.dp = ctx.dp, .zero = 0});
    dp.begin_step(2);
    model.train_microbatch(b.tok(0), b.tgt(0), kB, cfg.seq, 1e-3f);
    EXPECT_THROW(dp.finish_gradients(), RuntimeError);
  });
}

}  // namespace
}  // namespace mt
