// ZeRO 1-2 split a small model's blocks into several buckets (FlatLayout::kBlockBuckets), as
// ZeRO 0 does: each bucket's reduce-scatter is issued as soon as its blocks' gradients are
// final, under the rest of the backward, instead of one reduce-scatter of every block after
// it. The reduced gradients still equal one worker's, and the early buckets' reductions
// are issued while the backward still has blocks to run (order of issue, not timing).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "dp_bucket_model.h"
#include "model/gpt.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/parallel_context.h"
#include "test_util/forwarding_communicator.h"
#include "test_util/rel_diff.h"

namespace mt {
namespace {

using dp_bucket_model::config, dp_bucket_model::kB, dp_bucket_model::kDp, dp_bucket_model::kLayers;

std::vector<int> tokens(int n, uint64_t stream) {
  return dp_bucket_model::tokens(n, 11, stream);
}

bool all_zero(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (x[i] != 0) return false;
  return true;
}

// At the default --bucket-mb (25 MiB, far above this model) ZeRO 1-2 still give each block
// its own bucket, and each rank's reduced gradients equal one worker's over the same
// microbatches (2 per rank).
void check_gradients(int zero) {
  SCOPED_TRACE(str("zero ", zero));
  const ModelConfig cfg = config();
  const int T = cfg.seq, kM = 2, n = kDp * kM;
  const std::vector<int> tok = tokens(n * kB * T, 1), tgt = tokens(n * kB * T, 2);
  const float dloss = float(1.0 / (double(n * kB) * T));
  set_compute_threads(1);
  GPT ref(cfg, GPT::whole_model(cfg), TensorParallelShard{}, kB);
  ref.init(5);
  ref.zero_grads();
  for (int j = 0; j < n; ++j)
    ref.train_microbatch(tok.data() + j * kB * T, tgt.data() + j * kB * T, kB, T, dloss);

  run_local(kDp, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, kDp, 1, 1});
    GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, kB);
    model.init(5);
    DataParallel dp(model, {.dp = ctx.dp, .zero = zero, .bucket_mb = 25});
    ASSERT_EQ(dp.layout().buckets().size(), size_t(kLayers + 1));  // a block each, the edge
    dp.begin_step(kM);
    for (int m = 0; m < kM; ++m) {
      const int j = ctx.coord.dp * kM + m;
      model.train_microbatch(tok.data() + j * kB * T, tgt.data() + j * kB * T, kB, T, dloss);
    }
    dp.finish_gradients();
    for (const ParamInfo& info : model.table().entries()) {
      std::vector<float> g(info.numel);
      dp.read_grad(info, g.data());
      EXPECT_LE(test_util::max_rel_diff(g.data(), ref.grads().data() + info.offset, g.size()), 1e-5)
          << info.name << " on rank " << w.rank();
    }
  });
}

TEST(DataParallelZeroBuckets, SeveralBlockBucketsReduceToOneWorkersGradients) {
  for (int zero : {1, 2}) check_gradients(zero);
}

// What each reduce-scatter of one step's backward finds when it is issued. ZeRO 1 reduces in
// place in the flat gradients: the first one must find block 0's gradients still zero (its
// backward has not run: the last block's bucket went first). ZeRO 2 adds each reduced chunk
// into the shard when its pool buffer is needed again: a reduce-scatter issued after the
// shard holds gradients means an earlier bucket was issued, reduced and summed while the
// backward went on. With one bucket of every block both fail: it is issued after block 0's
// backward, and the edge's after it without a buffer changing hands.
void check_issue_order(int zero) {
  SCOPED_TRACE(str("zero ", zero));
  const ModelConfig cfg = config();
  const int T = cfg.seq;
  const std::vector<int> tok = tokens(kDp * kB * T, 3), tgt = tokens(kDp * kB * T, 4);
  run_local(kDp, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, kDp, 1, 1});
    GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, kB);
    model.init(5);
    DataParallel* engine = nullptr;
    std::vector<bool> block0_zero, shard_zero;
    auto watcher =
        std::make_shared<test_util::ForwardingCommunicator>(ctx.dp, [&](const std::string& op) {
          if (!engine || op != "reduce_scatter") return;
          const FlatLayout& l = engine->layout();
          const FlatUnit& block0 = l.units()[1];
          if (zero == 1)
            block0_zero.push_back(all_zero(engine->grad_storage() + block0.flat, block0.padded));
          else
            shard_zero.push_back(all_zero(engine->grad_storage(), l.shard_size()));
        });
    DataParallel dp(model, {.dp = watcher, .zero = zero, .bucket_mb = 25});
    engine = &dp;
    dp.begin_step(1);
    const int j = ctx.coord.dp;
    model.train_microbatch(tok.data() + j * kB * T, tgt.data() + j * kB * T, kB, T,
                           float(1.0 / (kDp * kB * T)));
    engine = nullptr;
    dp.finish_gradients();
    const std::vector<bool>& seen = zero == 1 ? block0_zero : shard_zero;
    ASSERT_FALSE(seen.empty()) << "rank " << w.rank();
    if (zero == 1) {
      EXPECT_TRUE(seen.front()) << "rank " << w.rank() << ": issued after block 0's backward";
      // Blocks 3, 2, 1 issued before block 0's backward; block 0 and the edge after it.
      EXPECT_EQ(seen, (std::vector<bool>{true, true, true, false, false})) << "rank " << w.rank();
    } else {
      EXPECT_TRUE(seen.front()) << "rank " << w.rank();
      EXPECT_FALSE(seen.back()) << "rank " << w.rank()
                                << ": no bucket was summed into the shard before the edge's";
      EXPECT_EQ(seen.size(), size_t(kLayers + 1)) << "rank " << w.rank();
    }
  });
}

TEST(DataParallelZeroBuckets, EarlyBucketsAreIssuedBeforeTheBackwardEnds) {
  for (int zero : {1, 2}) check_issue_order(zero);
}

}  // namespace
}  // namespace mt
