// --recompute selective and full against none, layout by layout: recomputation runs the
// same kernels on the same inputs in the same order, so in fp32 every step's loss and
// gradient norm and every weight after the updates must be bitwise the same (==, no
// tolerance). Full recomputation with --experts is refused (validate_options), so the MoE
// layout checks selective only.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util/temp_dir.h"
#include "train/session.h"
#include "train/session_tensors.h"
#include "train/step.h"
#include "train/validate_options.h"

namespace mt {
namespace {

constexpr int kSteps = 3;

using test_util::RankRun;

std::vector<RankRun> train(const TrainOptions& o) {
  return test_util::run_ranks(o, kSteps);
}

class Recompute : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test_util::TempDir;
    test_util::write_random_shard(*dir_ / "train.bin", 8192, 37, 7);
  }
  static void TearDownTestSuite() { delete dir_; }

  static TrainOptions base() {
    TrainOptions o = test_util::tiny_session_options(*dir_ / "train.bin", kSteps);
    o.parallel.bucket_mb = 0.001;  // several buckets per chunk
    return o;
  }

  static void check(TrainOptions o, std::vector<std::string> modes = {"selective", "full"}) {
    validate_train_options(o);
    const std::vector<RankRun> ref = train(o);
    for (const std::string& mode : modes) {
      SCOPED_TRACE("--recompute " + mode);
      ASSERT_TRUE(parse_recompute(mode, &o.optim.recompute));
      validate_train_options(o);
      const std::vector<RankRun> got = train(o);
      ASSERT_EQ(got.size(), ref.size());
      for (size_t rank = 0; rank < got.size(); ++rank) {
        EXPECT_EQ(got[rank].losses, ref[rank].losses) << "rank " << rank;
        EXPECT_EQ(got[rank].norms, ref[rank].norms) << "rank " << rank;
        ASSERT_EQ(got[rank].params.size(), ref[rank].params.size());
        for (const auto& [name, w] : ref[rank].params)
          EXPECT_TRUE(got[rank].params.at(name) == w) << name << ", rank " << rank;
      }
    }
  }
  static test_util::TempDir* dir_;
};
test_util::TempDir* Recompute::dir_ = nullptr;

TEST_F(Recompute, OneWorker) {
  check(base());
}

TEST_F(Recompute, DataParallelZero3) {
  TrainOptions o = base();
  o.parallel.dp = 2, o.parallel.zero = 3;
  check(o);
}

TEST_F(Recompute, TensorParallelWithSequenceParallel) {
  TrainOptions o = base();
  o.parallel.tp = 2, o.parallel.sequence_parallel = true;
  check(o);
}

TEST_F(Recompute, PipelineZeroBubble) {
  TrainOptions o = base();
  o.parallel.pp = 2, o.parallel.schedule = ScheduleKind::zb_h1, o.parallel.microbatches = 4;
  check(o);
}

// One block per stage (middle stages hold neither embedding nor head), and two chunks per
// rank.
TEST_F(Recompute, DeepAndInterleavedPipelines) {
  TrainOptions o = base();
  o.parallel.pp = 4, o.parallel.microbatches = 4;
  check(o);
  o.parallel.pp = 2, o.parallel.schedule = ScheduleKind::interleaved, o.parallel.virtual_stages = 2;
  check(o);
}

TEST_F(Recompute, ExpertParallelSelective) {
  TrainOptions o = base();
  o.model.experts = 4;
  o.parallel.dp = 2, o.parallel.ep = 2;
  check(o, {"selective"});
}

}  // namespace
}  // namespace mt
