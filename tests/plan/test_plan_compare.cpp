// plan --compare's pieces (plan/compare.h): a SPEC fixes exactly the knobs it names, bad
// SPECs are one-line usage errors, each column is the best layout of its kind, and the
// step's breakdown adds up to the step.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/compare.h"
#include "plan/software_profiles.h"

namespace mt::plan {
namespace {

PlanRequest gpu_request() {
  PlanRequest r;
  r.model.layers = 8, r.model.dim = 2048, r.model.heads = 16, r.model.seq = 2048;
  r.model.vocab = 51200;
  r.batch = 64;
  r.hardware = preset_profile("h100-80gb");
  r.devices = 16;
  return r;
}

TEST(PlanCompare, SpecFixesTheKnobsItNames) {
  PlanRequest base = gpu_request();
  base.precision = Precision::bf16;
  const PlanRequest r =
      with_layout_spec(base,
                       "dp=4,tp=2,pp=2,schedule=interleaved,virtual-stages=2,zero=1,micro-batch=2,"
                       "recompute=selective,sequence-parallel=true,cp=1,cp-comm=ring,ep=1");
  EXPECT_EQ(r.dp, 4);
  EXPECT_EQ(r.tp, 2);
  EXPECT_EQ(r.pp, 2);
  EXPECT_EQ(r.virtual_stages, 2);
  EXPECT_EQ(r.zero, 1);
  EXPECT_EQ(r.micro_batch, 2);
  EXPECT_EQ(r.schedule, "interleaved");
  EXPECT_EQ(r.recompute, Recompute::selective);
  EXPECT_EQ(r.sequence_parallel, true);
  EXPECT_EQ(r.precision, Precision::bf16);  // the request's own fixed knob stays
  EXPECT_FALSE(with_layout_spec(base, "tp=2").dp.has_value());
  for (const char* bad : {"", "tp", "tp=", "=2", "tp=2,,pp=2", "tp=two", "tp=2x", "tp=2,tp=4",
                          "width=2", "sequence-parallel=yes", "zero=5", "tp=0", "recompute=some",
                          "precision=fp8", "cp-comm=mesh"}) {
    try {
      with_layout_spec(base, bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(str("--compare '", bad, "'")), std::string::npos)
          << e.what();
    }
  }
}

TEST(PlanCompare, ColumnsAreTheBestOfTheirKindAndTheBreakdownAddsUp) {
  const PlanRequest r = gpu_request();
  const std::vector<Compared> c =
      compare_layouts(r, {"tp=8,pp=1", "tp=2,pp=2,schedule=1f1b", "dp=16,zero=3"});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].best.layout.tp, 8);
  EXPECT_EQ(c[1].best.layout.pp, 2);
  EXPECT_EQ(c[1].best.layout.schedule, "1f1b");
  EXPECT_EQ(c[2].best.layout.zero, 3);
  for (const Compared& x : c) {
    const PredictedTime& t = x.best.time;
    const StepBreakdown b = step_breakdown(t);
    EXPECT_NEAR(b.compute + b.tp + b.cp + b.ep + b.zero3 + b.bubble + b.dp + b.optimizer, t.step_s,
                1e-12 * t.step_s);
    EXPECT_GT(b.compute, 0);
    EXPECT_GE(b.compute, t.recompute_s);
  }
  EXPECT_GT(step_breakdown(c[0].best.time).tp, 0);
  EXPECT_GT(step_breakdown(c[1].best.time).bubble, 0);
  EXPECT_GT(step_breakdown(c[2].best.time).zero3, 0);
  EXPECT_THROW(compare_layouts(r, {"tp=8"}), UsageError);
  EXPECT_THROW(compare_layouts(r, {"tp=8", "tp=3"}), UsageError);  // 3 does not divide 16
}

}  // namespace
}  // namespace mt::plan
