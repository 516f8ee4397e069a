// The points of a training step where ranks meet, and the finiteness verdict they carry.
// Every collective a rank waits on is a point where one rank's hold-up (a core taken by
// another thread) stalls the others; so a step meets only where it must. Plain data
// parallelism at ZeRO 0 leaves the same weights, moments and gradients on every rank, so the
// post-update finiteness verdict needs no world all-reduce there; every other layout keeps
// it. Either way a poisoned update stops every rank with the same error, and the replicas
// stay bitwise identical (the premise of skipping the agreement). The loss's sum over dp is
// issued before the step waits for its gradients, so at plain dp ZeRO 0 the ranks meet once
// a step: no collective is issued after that wait.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "test_util/temp_dir.h"
#include "train/session.h"
#include "train/session_tensors.h"
#include "train/step.h"

namespace mt {
namespace {

struct Layout {
  int dp = 2, tp = 1, zero = 0;
  std::string sync = "every-step";
};

struct RankRun {
  uint64_t world_calls = 0;          // world collectives issued by steps 2..last
  uint64_t dp_calls_after_wait = 0;  // dp collectives they issued after the gradient wait began
  std::string error;                 // what train_step threw, if it did
  test_util::TensorsByName params;
};

class StepMeetings : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test_util::TempDir;
    test_util::write_random_shard(*dir_ / "train.bin", 4096, 19, 11);
  }
  static void TearDownTestSuite() { delete dir_; }

  static TrainOptions options(const Layout& l, double lr) {
    TrainOptions o;
    o.model.layers = 2, o.model.dim = 16, o.model.heads = 2, o.model.seq = 8, o.model.vocab = 19;
    o.model.positions = o.model.seq;
    o.io.data = *dir_ / "train.bin";
    o.optim.batch = 4 * l.dp;
    o.optim.steps = 3;
    o.optim.lr = lr;
    o.optim.lr_schedule = LrKind::constant;
    o.optim.seed = 5;
    o.parallel.dp = l.dp, o.parallel.tp = l.tp, o.parallel.zero = l.zero;
    o.parallel.dp_sync = dp_sync_from_flag(l.sync);
    o.parallel.bucket_mb = 0.001;  // several buckets, reduced while backward runs
    return o;
  }

  // Every rank's run of o.optim.steps steps (stopping at the first that throws).
  static std::vector<RankRun> run(const TrainOptions& o) {
    std::vector<RankRun> out(size_t(o.parallel.world()));
    run_local(o.parallel.world(), WorldOptions{}, [&](CommWorld& w) {
      std::unique_ptr<Session> s = build_session(o, w, RunInfo{});
      Trace trace(false, w.rank(), 0);
      RankRun& r = out[size_t(w.rank())];
      try {
        uint64_t calls = 0;
        for (int step = 1; step <= o.optim.steps; ++step) {
          if (step == 2) calls = s->ctx.world->stats().calls;
          train_step(*s, step, trace);
          if (step >= 2)
            r.dp_calls_after_wait +=
                s->dp.dp_group().stats().calls - s->dp.calls_at_gradient_wait();
        }
        r.world_calls = s->ctx.world->stats().calls - calls;
      } catch (const RuntimeError& e) {
        r.error = e.what();
        return;  // every rank stops here; the weights are not read (a collective)
      }
      r.params = test_util::params_by_name(*s);
    });
    return out;
  }
  static test_util::TempDir* dir_;
};
test_util::TempDir* StepMeetings::dir_ = nullptr;

TEST_F(StepMeetings, PlainDataParallelAtZeroZeroDoesNotMeetOverTheWorld) {
  const std::vector<RankRun> runs = run(options({2, 1, 0}, 1e-3));
  for (size_t rank = 0; rank < runs.size(); ++rank) {
    EXPECT_EQ(runs[rank].error, "") << "rank " << rank;
    EXPECT_EQ(runs[rank].world_calls, 0u) << "rank " << rank;
    // The premise: every rank updated the same weights from the same gradients.
    EXPECT_EQ(runs[rank].params, runs[0].params) << "rank " << rank << " diverged";
  }
}

// The step's one meeting at plain dp ZeRO 0: every dp collective of the step (the gradient
// buckets, the loss's sum) is in flight when the rank first waits, so nothing issued later
// can stall one rank behind the other a second time.
TEST_F(StepMeetings, PlainDataParallelAtZeroZeroIssuesNothingAfterTheGradientWait) {
  for (const std::vector<RankRun>& runs :
       {run(options({2, 1, 0}, 1e-3)), run(options({4, 1, 0}, 1e-3))})
    for (size_t rank = 0; rank < runs.size(); ++rank) {
      EXPECT_EQ(runs[rank].error, "") << "rank " << rank;
      EXPECT_EQ(runs[rank].dp_calls_after_wait, 0u) << "rank " << rank;
    }
}

// Where the ranks update different elements (ZeRO shards, tp halves) or different values
// (replicas on their own gradients), the verdicts are agreed over the world at every step.
TEST_F(StepMeetings, OtherLayoutsAgreeOverTheWorldAtEveryStep) {
  for (const Layout& l :
       {Layout{2, 1, 1}, Layout{2, 1, 2}, Layout{1, 2, 0}, Layout{2, 1, 0, "local:2"}}) {
    SCOPED_TRACE(str("dp ", l.dp, " tp ", l.tp, " zero ", l.zero, " ", l.sync));
    for (const RankRun& r : run(options(l, 1e-3))) {
      EXPECT_EQ(r.error, "");
      EXPECT_EQ(r.world_calls, 2u);  // steps 2 and 3
    }
  }
}

// An lr of 1e38 overflows the first update: every rank stops at step 1 with the verdict,
// whether it was agreed over the world or is every rank's own.
TEST_F(StepMeetings, APoisonedUpdateStopsEveryRank) {
  for (const Layout& l : {Layout{2, 1, 0}, Layout{2, 1, 1}, Layout{1, 2, 0}}) {
    SCOPED_TRACE(str("dp ", l.dp, " tp ", l.tp, " zero ", l.zero));
    const std::vector<RankRun> runs = run(options(l, 1e38));
    for (size_t rank = 0; rank < runs.size(); ++rank)
      EXPECT_NE(runs[rank].error.find("step 1: non-finite weights after the update"),
                std::string::npos)
          << "rank " << rank << ": " << runs[rank].error;
  }
}

}  // namespace
}  // namespace mt
