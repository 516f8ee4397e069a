// The odd dp ranks' update deferred to each block's first use in the next forward (train/
// deferred_update.h). A run whose steps defer must be bit for bit a run that updates
// everything at each step's end: the losses and norms of every step (a deferred part that
// were skipped, applied twice, read zeroed or doubled gradients, or used the wrong scalars
// would move the next step's loss) and the deferring rank's weights at the end.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/matmul_bf16.h"
#include "test_util/temp_dir.h"
#include "train/session.h"
#include "train/session_tensors.h"
#include "train/step.h"
#include "train/validate_options.h"

namespace mt {
namespace {

constexpr int kSteps = 5;

struct TrainRun {
  std::vector<double> losses, norms;
  std::vector<float> params;        // rank 1's parameter storage after the last step
  std::vector<char> deferring;      // per rank: whether it defers
  bool pending_after_step = false;  // rank 1 had parts pending after a deferring step
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// defer: every step but the last may defer (as the trainer allows before another step).
TrainRun train(const TrainOptions& o, bool defer) {
  TrainRun run;
  run.deferring.assign(size_t(o.parallel.world()), 0);
  run_local(o.parallel.world(), WorldOptions{}, [&](CommWorld& w) {
    std::unique_ptr<Session> s = build_session(o, w, RunInfo{});
    run.deferring[size_t(w.rank())] = s->deferred.enabled();
    Trace trace(false, w.rank(), 0);
    for (int step = 1; step <= kSteps; ++step) {
      const StepRecord r = train_step(*s, step, trace, defer && step < kSteps);
      if (w.rank() == 0) run.losses.push_back(r.loss), run.norms.push_back(r.grad_norm);
      if (w.rank() == 1 && step == 1) run.pending_after_step = !s->deferred.settled();
    }
    EXPECT_TRUE(s->deferred.settled());  // the last step defers nothing
    if (w.rank() == 1) {
      const float* p = s->dp.param_storage();
      run.params.assign(p, p + s->dp.param_storage_floats());
    }
  });
  return run;
}

// Each element's update is its own: the parts inside and outside a table range, updated
// one after the other, are one update.
TEST(AdamWParts, InsideThenOutsideIsOneUpdate) {
  const std::vector<OptimPiece> pieces = {
      {0, 0, 0, 40, true}, {40, 40, 40, 37, false}, {77, 77, 77, 50, true}};
  AdamW split({}, pieces), whole({}, pieces);
  std::vector<float> params(127), grads(127);
  for (size_t i = 0; i < params.size(); ++i)
    params[i] = 0.01f * float(i) - 0.3f, grads[i] = 0.02f * float(i % 13) - 0.1f;
  std::vector<float> ref = params;
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(split.update_part(params.data(), grads.data(), 1e-2, step, 0.5f, {40, 77}, false));
    ASSERT_TRUE(split.update_part(params.data(), grads.data(), 1e-2, step, 0.5f, {40, 77}, true));
    ASSERT_TRUE(whole.update(ref.data(), grads.data(), 1e-2, step, 0.5f));
  }
  EXPECT_TRUE(same_bits(params, ref));
  // The moments too (the next update reads them).
  EXPECT_EQ(std::memcmp(split.exp_avg().data(), whole.exp_avg().data(), 127 * 4), 0);
  EXPECT_EQ(std::memcmp(split.exp_avg_sq().data(), whole.exp_avg_sq().data(), 127 * 4), 0);
}

class DeferredUpdateTest : public ::testing::Test {
 protected:
  void SetUp() override { test_util::write_random_shard(dir_ / "train.bin", 8192, 37, 11); }
  TrainOptions options(int dp, Precision precision, int microbatches) const {
    TrainOptions o = test_util::tiny_session_options(dir_ / "train.bin", kSteps);
    o.parallel.dp = dp;
    o.parallel.microbatches = microbatches;
    o.optim.precision = precision;
    o.optim.grad_clip = 0.05;  // the clip coefficient (< 1 here) is part of what is deferred
    validate_train_options(o);
    return o;
  }
  test_util::TempDir dir_;
};

TEST_F(DeferredUpdateTest, DeferringRunEqualsUpdatingRunBitwise) {
  struct Case {
    std::string name;
    int dp;
    Precision precision;
    int microbatches;
  };
  std::vector<Case> cases = {{"dp 2 fp32", 2, Precision::fp32, 1},
                             {"dp 2 fp32, 2 microbatches", 2, Precision::fp32, 2},
                             {"dp 4 fp32", 4, Precision::fp32, 1}};
  if (bf16_matmul_supported()) cases.push_back({"dp 2 bf16", 2, Precision::bf16, 1});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const TrainOptions o = options(c.dp, c.precision, c.microbatches);
    const TrainRun deferred = train(o, true), updated = train(o, false);
    for (int r = 0; r < c.dp; ++r) EXPECT_EQ(deferred.deferring[size_t(r)], r % 2 == 1) << r;
    EXPECT_TRUE(deferred.pending_after_step);  // it did defer
    EXPECT_FALSE(updated.pending_after_step);
    EXPECT_EQ(deferred.losses, updated.losses);
    EXPECT_EQ(deferred.norms, updated.norms);
    EXPECT_TRUE(same_bits(deferred.params, updated.params));
  }
}

// Where a rank's verdict is not every rank's, or there is no second rank, nothing defers.
TEST_F(DeferredUpdateTest, OnlyPlainDataParallelAtZeroZeroDefers) {
  TrainOptions o = options(2, Precision::fp32, 1);
  o.parallel.zero = 1;
  EXPECT_EQ(train(o, true).deferring, (std::vector<char>{0, 0}));
  EXPECT_EQ(train(options(1, Precision::fp32, 1), true).deferring, (std::vector<char>{0}));
}

}  // namespace
}  // namespace mt
