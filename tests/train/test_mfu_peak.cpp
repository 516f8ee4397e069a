// The mfu denominator (train/mfu_peak.h) is measured at its first read, once per process,
// and never by a run whose mfu nothing reads: a train start no longer waits 0.3-0.6 s for
// it before the first step. The peak of these tests counts its measurements instead of
// timing GEMMs.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "test_util/temp_dir.h"
#include "train/mfu_peak.h"
#include "train/session.h"
#include "train/session_tensors.h"
#include "train/step.h"

namespace mt {
namespace {

struct CountedPeak {
  std::atomic<int> measured{0};
  std::shared_ptr<const MfuPeak> peak = MfuPeak::on_first_read([this] {
    ++measured;
    return MfuPeak::Figure{2.0, "counted"};
  });
};

TEST(MfuPeak, IsMeasuredAtItsFirstReadOnceForEveryThread) {
  CountedPeak c;
  EXPECT_EQ(c.measured, 0);
  std::vector<std::thread> readers;
  std::atomic<int> right{0};
  for (int i = 0; i < 4; ++i)
    readers.emplace_back([&] { right += c.peak->read().gflops_per_thread == 2.0; });
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(c.measured, 1);
  EXPECT_EQ(right, 4);
  EXPECT_EQ(c.peak->read().method, "counted");
  EXPECT_FALSE(MfuPeak::given(3)->needs_measuring());
  EXPECT_EQ(MfuPeak::given(3)->read().gflops_per_thread, 3);
}

TEST(MfuPeak, OnlyProgressMetricsAndTheBreakdownReadIt) {
  TrainOptions o;
  EXPECT_TRUE(run_reads_mfu(o));  // the progress lines
  o.io.quiet = true;
  EXPECT_FALSE(run_reads_mfu(o));
  o.io.metrics = "m.jsonl";
  EXPECT_TRUE(run_reads_mfu(o));
  o.io.metrics.clear(), o.io.quiet = false, o.io.progress = ProgressMode::none;
  EXPECT_FALSE(run_reads_mfu(o));
  o.engine.breakdown = true;
  EXPECT_TRUE(run_reads_mfu(o));
}

// Two ranks (local threads) and two steps: building the sessions measures nothing; the
// first step's end measures once for both, and mfu is the model's FLOP rate over the peak.
// A --quiet run without --metrics never measures.
TEST(MfuPeak, TrainingMeasuresAfterTheFirstStepOnlyWhenMfuIsRead) {
  test_util::TempDir dir;
  test_util::write_random_shard(dir / "train.bin", 4096, 19, 5);
  for (bool quiet : {false, true}) {
    SCOPED_TRACE(quiet ? "--quiet" : "progress lines");
    TrainOptions o;
    o.model.layers = 1, o.model.dim = 16, o.model.heads = 2, o.model.seq = 8, o.model.vocab = 19;
    o.model.positions = o.model.seq;
    o.io.data = dir / "train.bin";
    o.io.quiet = quiet;
    o.optim.batch = 4, o.optim.steps = 2;
    o.parallel.dp = 2;
    CountedPeak c;
    RunInfo info;
    info.peak = c.peak;
    std::atomic<int> before_step{0}, after_step{0};
    std::vector<double> mfu(4);
    run_local(2, WorldOptions{}, [&](CommWorld& w) {
      std::unique_ptr<Session> s = build_session(o, w, info);
      Trace trace(false, w.rank(), 0);
      before_step += c.measured;
      for (int step = 1; step <= 2; ++step) {
        const StepRecord r = train_step(*s, step, trace);
        mfu[size_t(2 * w.rank() + step - 1)] =
            r.mfu * 2.0e9 * 2 / (o.model.flops_per_token() * r.tokens_per_s);
        if (step == 1) after_step += c.measured;
      }
    });
    EXPECT_EQ(before_step, 0);
    EXPECT_EQ(c.measured, quiet ? 0 : 1);
    EXPECT_EQ(after_step, quiet ? 0 : 2);
    for (double m : mfu) EXPECT_NEAR(m, quiet ? 0 : 1, 1e-12);  // mfu x peak / model rate
  }
}

}  // namespace
}  // namespace mt
