// --dp-sync (parallel/data_parallel/replica_sync.h) on real sessions: a local step is one
// worker's step on the replica's own share of the batch; the replicas drift apart and are
// bitwise identical again after a synchronisation; local:1 is every-step bitwise; DiLoCo's
// outer step is Nesterov momentum on the averaged change.
#include <gtest/gtest.h>

#include <cmath>

#include <string>
#include <vector>

#include "parallel/data_parallel/replica_sync.h"
#include "test_util/rel_diff.h"
#include "test_util/temp_dir.h"
#include "train/session.h"
#include "train/session_tensors.h"
#include "train/step.h"

namespace mt {
namespace {

TEST(ReplicaSync, ParsesTheModes) {
  DpSync d;
  ASSERT_TRUE(parse_dp_sync("every-step", &d));
  EXPECT_EQ(d.kind, DpSync::Kind::every_step);
  ASSERT_TRUE(parse_dp_sync("local:4", &d));
  EXPECT_EQ(d.kind, DpSync::Kind::local);
  EXPECT_EQ(d.period, 4);
  ASSERT_TRUE(parse_dp_sync("diloco:16", &d));
  EXPECT_EQ(d.kind, DpSync::Kind::diloco);
  EXPECT_EQ(d.period, 16);
  for (const char* bad : {"", "local", "local:", "local:0", "local:-1", "local:2x", "sync:2",
                          "every_step", "diloco:1.5"})
    EXPECT_FALSE(parse_dp_sync(bad, &d)) << bad;
}

TEST(ReplicaSync, DilocoOuterStepIsNesterovOnTheAveragedChange) {
  std::vector<float> anchor = {1.0f, 2.0f}, momentum = {0.0f, 0.5f}, w = {0.5f, 2.5f};
  diloco_outer_step(anchor.data(), momentum.data(), w.data(), 2, 0.5f, 0.9f);
  // delta = (0.5, -0.5); v = (0.5, 0.45 - 0.5 = -0.05); anchor -= 0.5 (delta + 0.9 v)
  EXPECT_FLOAT_EQ(momentum[0], 0.5f);
  EXPECT_FLOAT_EQ(momentum[1], -0.05f);
  EXPECT_FLOAT_EQ(anchor[0], 1.0f - 0.5f * (0.5f + 0.45f));
  EXPECT_FLOAT_EQ(anchor[1], 2.0f - 0.5f * (-0.5f - 0.045f));
  EXPECT_EQ(w, anchor);
  // lr 1, no momentum: the plain average.
  std::vector<float> a2 = {3.0f}, m2 = {0.0f}, w2 = {1.0f};
  EXPECT_TRUE(diloco_outer_step(a2.data(), m2.data(), w2.data(), 1, 1.0f, 0.0f));
  EXPECT_EQ(w2[0], 1.0f);
}

// Issue #26: the outer step runs after the optimizer's finiteness check; it reports an
// overflow of its own so the run stops before anything saves the weights.
TEST(ReplicaSync, DilocoOuterStepReportsAnOverflow) {
  std::vector<float> anchor = {1.0f, 2.0f}, momentum = {0.0f, 0.0f}, w = {-3.0f, 2.0f};
  EXPECT_FALSE(diloco_outer_step(anchor.data(), momentum.data(), w.data(), 2, 3e38f, 0.9f));
  EXPECT_FALSE(std::isfinite(w[0]));
}

class ReplicaSyncRuns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test_util::TempDir;
    test_util::write_random_shard(*dir_ / "train.bin", 4096, 19, 7);
  }
  static void TearDownTestSuite() { delete dir_; }

  static TrainOptions options(int dp, int batch, int steps, const std::string& sync) {
    TrainOptions o;
    o.model.layers = 2, o.model.dim = 16, o.model.heads = 2, o.model.seq = 8, o.model.vocab = 19;
    o.model.positions = o.model.seq;
    o.io.data = *dir_ / "train.bin";
    o.optim.batch = batch;
    o.optim.steps = steps;
    o.optim.lr_schedule = LrKind::constant;
    o.optim.grad_clip = 0.5;
    o.optim.seed = 3;
    o.parallel.dp = dp;
    o.parallel.dp_sync = dp_sync_from_flag(sync);
    o.parallel.bucket_mb = 0.001;
    return o;
  }

  // Every rank's weights by name after each step.
  static std::vector<std::vector<test_util::TensorsByName>> run(const TrainOptions& o) {
    std::vector<std::vector<test_util::TensorsByName>> out(size_t(o.parallel.world()));
    run_local(o.parallel.world(), WorldOptions{}, [&](CommWorld& w) {
      std::unique_ptr<Session> s = build_session(o, w, RunInfo{});
      Trace trace(false, w.rank(), 0);
      for (int step = 1; step <= o.optim.steps; ++step) {
        train_step(*s, step, trace);
        out[size_t(w.rank())].push_back(test_util::params_by_name(*s));
      }
    });
    return out;
  }
  static test_util::TempDir* dir_;
};
test_util::TempDir* ReplicaSyncRuns::dir_ = nullptr;

TEST_F(ReplicaSyncRuns, LocalStepsDriftThenTheAverageMakesReplicasIdentical) {
  const auto local = run(options(2, 8, 3, "local:3"));
  // Step 1 is local: replica 0 took one worker's step on its own 4 sequences (the first
  // half of global batch 0), its gradient the mean over them.
  const auto alone = run(options(1, 4, 1, "every-step"));
  for (const auto& [name, w] : alone[0][0])
    EXPECT_LE(test_util::max_rel_diff(local[0][0].at(name).data(), w.data(), w.size()), 1e-5)
        << name;
  EXPECT_NE(local[0][0], local[1][0]) << "replicas did not drift on a local step";
  EXPECT_NE(local[0][1], local[1][1]);
  EXPECT_EQ(local[0][2], local[1][2]) << "replicas differ after the synchronising step";
  // diloco:2 with outer lr 1 and no momentum is the plain average: identical replicas too.
  TrainOptions d = options(2, 8, 2, "diloco:2");
  d.parallel.outer_lr = 1.0;
  d.parallel.outer_momentum = 0.0;
  const auto diloco = run(d);
  EXPECT_NE(diloco[0][0], diloco[1][0]);
  EXPECT_EQ(diloco[0][1], diloco[1][1]);
}

// The synchronisation is the plain mean of the replicas' weights: after one local step,
// a ReplicaSync due at step 2 replaces each replica's weights by (w0 + w1) / 2, bitwise.
TEST_F(ReplicaSyncRuns, SynchronisingAveragesTheReplicasWeights) {
  const TrainOptions o = options(2, 8, 100, "local:100");  // step 1 is local
  std::vector<test_util::TensorsByName> before(2), after(2);
  run_local(2, WorldOptions{}, [&](CommWorld& w) {
    std::unique_ptr<Session> s = build_session(o, w, RunInfo{});
    Trace trace(false, w.rank(), 0);
    train_step(*s, 1, trace);
    before[size_t(w.rank())] = test_util::params_by_name(*s);
    ReplicaSync sync({DpSync::Kind::local, 2}, 0.7, 0.9, /*last_step=*/2);
    EXPECT_FALSE(sync.after_step(s->dp, 1));  // a local step: nothing to do
    EXPECT_TRUE(sync.after_step(s->dp, 2));
    after[size_t(w.rank())] = test_util::params_by_name(*s);
  });
  ASSERT_NE(before[0], before[1]);
  for (const auto& [name, w0] : before[0]) {
    const std::vector<float>& w1 = before[1].at(name);
    std::vector<float> mean(w0.size());
    for (size_t i = 0; i < w0.size(); ++i) mean[i] = (w0[i] + w1[i]) / 2.0f;
    EXPECT_EQ(after[0].at(name), mean) << name;
    EXPECT_EQ(after[1].at(name), mean) << name;
  }
}

TEST_F(ReplicaSyncRuns, LocalOneIsEveryStepBitwise) {
  const auto sync = run(options(2, 8, 3, "every-step"));
  const auto local1 = run(options(2, 8, 3, "local:1"));
  for (size_t rank = 0; rank < 2; ++rank)
    for (size_t step = 0; step < 3; ++step)
      EXPECT_EQ(local1[rank][step], sync[rank][step]) << "rank " << rank << " step " << step + 1;
}

}  // namespace
}  // namespace mt
