// The gradient norm's squares taken while the gradient wait waits (piece_squares.h): a rank
// that reaches the end of its backward first squares the pieces of the buckets already
// reduced while its peer is still short of the last ones, and the sums it reports are the
// bits of the old path (every piece squared after the wait). Gradients changed after the
// wait (the tied embedding's write_grad, --dp-sync's scale_grads) are squared again.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "dp_bucket_model.h"
#include "model/gpt.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/parallel_context.h"
#include "test_util/forwarding_communicator.h"

namespace mt {
namespace {

using dp_bucket_model::config, dp_bucket_model::kB, dp_bucket_model::kDp, dp_bucket_model::kLayers;

std::vector<int> tokens(int n, uint64_t stream) {
  return dp_bucket_model::tokens(n, 17, stream);
}

struct StepResult {
  LocalGradSquares squares;
  size_t early = 0;  // floats squared while waiting
};

// One backward at dp 2 on rank `rank`'s engine; rank 1 sleeps before issuing its last
// collective of the backward (the edge bucket's), so rank 0 waits for it with the block
// buckets already reduced. change(dp) runs between the wait and the norm.
using Change = std::function<void(GPT&, DataParallel&)>;

StepResult one_step(CommWorld& w, int zero, bool while_waiting, const Change& change = {}) {
  const ModelConfig cfg = config();
  const int T = cfg.seq;
  const std::vector<int> tok = tokens(kDp * kB * T, 1), tgt = tokens(kDp * kB * T, 2);
  ParallelContext ctx = make_parallel_context(w, MeshShape{1, kDp, 1, 1});
  GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, kB);
  model.init(7);
  int issued = 0;
  auto comm =
      std::make_shared<test_util::ForwardingCommunicator>(ctx.dp, [&](const std::string& op) {
        if (op == "all_gather") return;
        if (w.rank() == 1 && ++issued == kLayers + 1)  // a bucket per block, then the edge
          std::this_thread::sleep_for(std::chrono::milliseconds(60));
      });
  DataParallel dp(model, {.dp = comm, .zero = zero, .squares_while_waiting = while_waiting});
  EXPECT_EQ(dp.layout().buckets().size(), size_t(kLayers + 1));
  dp.begin_step(1);
  const int j = ctx.coord.dp;
  model.train_microbatch(tok.data() + j * kB * T, tgt.data() + j * kB * T, kB, T,
                         float(1.0 / (kDp * kB * T)));
  dp.finish_gradients();
  if (change) change(model, dp);
  return {dp.local_grad_squares(), dp.squared_while_waiting()};
}

void expect_same_bits(const LocalGradSquares& a, const LocalGradSquares& b) {
  EXPECT_EQ(std::memcmp(&a.split, &b.split, sizeof(double)), 0) << a.split << " " << b.split;
  EXPECT_EQ(std::memcmp(&a.replicated, &b.replicated, sizeof(double)), 0)
      << a.replicated << " " << b.replicated;
}

TEST(DataParallelWaitSquares, TheFirstRankSquaresReducedBucketsWhileWaitingSameBits) {
  for (int zero : {0, 1}) {
    SCOPED_TRACE(str("zero ", zero));
    run_local(kDp, WorldOptions{}, [&](CommWorld& w) {
      set_compute_threads(1);
      const StepResult early = one_step(w, zero, true), late = one_step(w, zero, false);
      EXPECT_EQ(late.early, 0u);
      if (w.rank() == 0) {
        // The blocks' buckets came back while rank 1 slept: their pieces were squared then.
        EXPECT_GT(early.early, 0u) << "nothing squared while waiting for rank 1";
      }
      expect_same_bits(early.squares, late.squares);
      EXPECT_GT(early.squares.replicated, 0.0);
    });
  }
}

// Pieces whose gradients change after the wait are squared again: the result equals the old
// path's after the same change, bit for bit, and differs from the unchanged gradients'.
// The changed tensors are the last block's, whose bucket is reduced first: squared early.
TEST(DataParallelWaitSquares, GradientsChangedAfterTheWaitAreSquaredAgain) {
  const std::string last = str("h.", kLayers - 1, ".");
  const std::vector<std::pair<std::string, Change>> changes = {
      {"write_grad",
       [&](GPT& m, DataParallel& dp) {  // as the tied embedding's sum does
         for (const ParamInfo& t : m.table().entries()) {
           if (t.name.find(last) == std::string::npos) continue;
           std::vector<float> g(t.numel);
           dp.read_grad(t, g.data());
           for (float& x : g) x *= 3.0f;
           dp.write_grad(t, g.data());
         }
       }},
      {"scale_grads", [](GPT&, DataParallel& dp) { dp.scale_grads(0.25f); }}};
  for (int zero : {0, 1})
    for (const auto& [name, change] : changes) {
      SCOPED_TRACE(str("zero ", zero, ", ", name));
      run_local(kDp, WorldOptions{}, [&](CommWorld& w) {
        set_compute_threads(1);
        const StepResult plain = one_step(w, zero, true);
        const StepResult early = one_step(w, zero, true, change);
        const StepResult late = one_step(w, zero, false, change);
        if (w.rank() == 0) {
          EXPECT_GT(early.early, 0u);
        }
        expect_same_bits(early.squares, late.squares);
        EXPECT_NE(early.squares.split + early.squares.replicated,
                  plain.squares.split + plain.squares.replicated);
      });
    }
}

}  // namespace
}  // namespace mt
