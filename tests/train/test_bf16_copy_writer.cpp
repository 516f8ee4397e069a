// --precision bf16: the optimizer writes the linears' bf16 weight copies (train/
// bf16_copy_writer.h). A run whose copies the optimizer writes must be bit for bit a run whose
// copies are converted at their first use each step (the writer switched off), in every
// layout where it applies, and the writer must take every dense linear's copy there. If the
// optimizer's copies were stale or wrong, the next step's GEMMs would read them: the losses,
// norms and weights would move.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/matmul_bf16.h"
#include "test_util/temp_dir.h"
#include "train/session.h"
#include "train/session_tensors.h"
#include "train/step.h"
#include "train/validate_options.h"

namespace mt {
namespace {

constexpr int kSteps = 4;

struct TrainRun {
  std::vector<double> losses, norms;
  std::vector<float> params;  // rank 0's parameter storage after the last step
  size_t copies = 0;          // the copies rank 0's optimizer wrote
};

TrainRun train(TrainOptions o, bool writer) {
  validate_train_options(o);
  TrainRun run;
  run_local(o.parallel.world(), WorldOptions{}, [&](CommWorld& w) {
    std::unique_ptr<Session> s = build_session(o, w, RunInfo{});
    if (!writer) {  // the copies convert at their first use, as before the writer
      s->opt.write_bf16_copies({});
      s->bf16_copies = Bf16CopyWriter();
    }
    Trace trace(false, w.rank(), 0);
    for (int step = 1; step <= kSteps; ++step) {
      const StepRecord r = train_step(*s, step, trace);
      if (w.rank() == 0) run.losses.push_back(r.loss), run.norms.push_back(r.grad_norm);
    }
    if (w.rank() == 0) {
      const float* p = s->dp.param_storage();
      run.params.assign(p, p + s->dp.param_storage_floats());
      run.copies = s->bf16_copies.copies();
    }
  });
  return run;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The optimizer takes a copy only when its pieces cover every element of it, and once: a
// ZeRO shard's piece covering half a weight, or a second copy of the same weights, would
// leave a copy partly stale. Asked for partial copies (ZeRO 1-2), it takes any range it
// updates a part of and names the rest, which the caller converts.
TEST(AdamWBf16Copies, TakesOnlyRangesItUpdatesWhole) {
  // Two tensors: [0, 100) decayed, [100, 150) not; the rank updates [0, 120) only.
  AdamW opt({}, {{0, 0, 0, 100, true}, {100, 100, 100, 20, false}});
  std::vector<bf16> a(60), b(30), c(30), d(10);
  const std::vector<bool> taken = opt.write_bf16_copies({{10, a.data(), 60},    // inside
                                                         {90, b.data(), 30},    // over the seam
                                                         {110, c.data(), 30},   // half outside
                                                         {20, d.data(), 10}});  // overlaps a
  EXPECT_EQ(taken, (std::vector<bool>{true, true, false, false}));
  std::vector<float> params(150), grads(150, 0.5f);
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.01f * float(i);
  std::vector<float> plain = params;
  AdamW ref({}, {{0, 0, 0, 100, true}, {100, 100, 100, 20, false}});
  ASSERT_TRUE(opt.update(params.data(), grads.data(), 1e-2, 1));
  ASSERT_TRUE(ref.update(plain.data(), grads.data(), 1e-2, 1));
  EXPECT_TRUE(same_bits(params, plain));  // the split into runs changes no update
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], float_to_bf16(params[10 + i])) << i;
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(b[i], float_to_bf16(params[90 + i])) << i;
  for (bf16 x : c) EXPECT_EQ(x, bf16(0));  // not taken: never written
}

TEST(AdamWBf16Copies, TakesPartialRangesAndNamesTheirRest) {
  // A shard: the rank updates [20, 50) and [70, 90) of a 100-element weight.
  AdamW opt({}, {{20, 20, 20, 30, true}, {70, 70, 70, 20, true}});
  std::vector<bf16> a(100), b(10);
  const std::vector<bool> taken = opt.write_bf16_copies({{0, a.data(), 100},   // in part
                                                         {55, b.data(), 10}},  // none of it
                                                        true);
  EXPECT_EQ(taken, (std::vector<bool>{true, false}));
  using Gaps = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(opt.uncovered(0, 100), (Gaps{{0, 20}, {50, 70}, {90, 100}}));
  EXPECT_EQ(opt.uncovered(25, 10), Gaps{});
  EXPECT_EQ(opt.uncovered(45, 30), (Gaps{{50, 70}}));
  std::vector<float> params(100), grads(100, 0.5f);
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.01f * float(i);
  ASSERT_TRUE(opt.update(params.data(), grads.data(), 1e-2, 1));
  for (size_t i = 0; i < a.size(); ++i) {
    const bool updated = (i >= 20 && i < 50) || (i >= 70 && i < 90);
    EXPECT_EQ(a[i], updated ? float_to_bf16(params[i]) : bf16(0)) << i;
  }
}

class Bf16CopyWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!bf16_matmul_supported())
      GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU (needs AVX-512)";
    test_util::write_random_shard(dir_ / "train.bin", 8192, 37, 11);
  }
  TrainOptions base() const {
    TrainOptions o = test_util::tiny_session_options(dir_ / "train.bin", kSteps);
    o.optim.precision = Precision::bf16;
    return o;
  }
  test_util::TempDir dir_;
};

TEST_F(Bf16CopyWriterTest, WrittenCopiesEqualConvertedOnesBitwise) {
  struct Layout {
    std::string name;
    int dp, tp, zero;
    bool llama;
  };
  const std::vector<Layout> layouts = {
      {"one worker", 1, 1, 0, false},  {"dp 2", 2, 1, 0, false},
      {"tp 2", 1, 2, 0, false},        {"llama", 1, 1, 0, true},
      {"dp 2 zero 1", 2, 1, 1, false}, {"dp 2 zero 2", 2, 1, 2, false},
      {"dp 4 zero 1", 4, 1, 1, false}, {"dp 2 zero 3", 2, 1, 3, false}};
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name);
    TrainOptions o = base();
    o.parallel.dp = l.dp, o.parallel.tp = l.tp, o.parallel.zero = l.zero;
    if (l.llama) o.model.arch = Arch::llama;
    const TrainRun written = train(o, true), converted = train(o, false);
    // Every block's four linears and the head where the writer applies at ZeRO 0. At ZeRO
    // 1-2 those that rank 0's shard covers a part of (the rest converted after the
    // all-gather); none at ZeRO 3.
    if (l.zero == 0)
      EXPECT_EQ(written.copies, size_t(4 * o.model.layers + 1));
    else if (l.zero < 3)
      EXPECT_GT(written.copies, 0u);
    else
      EXPECT_EQ(written.copies, 0u);
    EXPECT_EQ(converted.copies, 0u);
    EXPECT_EQ(written.losses, converted.losses);
    EXPECT_EQ(written.norms, converted.norms);
    EXPECT_TRUE(same_bits(written.params, converted.params));
  }
}

}  // namespace
}  // namespace mt
