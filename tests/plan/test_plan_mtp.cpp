// Issue #30 item 1: DeepSeek-V3's multi-token prediction (plan --mtp-layers) costed on the
// chunk that holds the output head -- a block like the model's last, the 2h -> h projection
// and the shared head and loss again -- in time, parameters and activations; refused where
// the software has none.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "deepseek_requests.h"
#include "plan/memory_model.h"
#include "plan/search.h"
#include "plan/software_profiles.h"
#include "plan/time_model.h"
#include "schedule/schedule.h"

namespace mt::plan {
namespace {

// A small DeepSeek-style MoE model under DeepSeek-V3's software, pp 2 (1F1B).
PlanRequest deepseek_like(int mtp_layers) {
  return testing::deepseek_request(testing::deepseek_small_model(), 16, 4, mtp_layers);
}

Layout pp2() {
  Layout l;
  l.dp = 2, l.pp = 2, l.ep = 2, l.zero = 1;
  l.precision = Precision::bf16;
  return l;
}

TEST(PlanMtp, CostsABlockAndTheHeadAgainOnTheHeadsStage) {
  const auto without = stage_costs(deepseek_like(0), pp2());
  const auto with = stage_costs(deepseek_like(1), pp2());
  ASSERT_EQ(with.size(), 2u);
  // The first stage has no head: unchanged.
  EXPECT_EQ(with[0].forward, without[0].forward);
  EXPECT_EQ(with[0].params, without[0].params);
  // The last: one more block (a MoE layer like the last) and more than its weights alone.
  EXPECT_EQ(with[1].blocks, without[1].blocks + 1);
  const double per_block_fwd = without[1].forward / without[1].blocks;
  EXPECT_GT(with[1].forward - without[1].forward, 0.5 * per_block_fwd);
  EXPECT_GT(with[1].backward, without[1].backward);
  const double h = 1024;
  EXPECT_GT(with[1].params - without[1].params, 2 * h * h);  // projection + the block
}

// Without pp the one stage holds the head (with pp the largest stage, which the estimate
// returns, is the first here).
TEST(PlanMtp, TheHeadsStageHoldsItsParametersAndActivations) {
  Layout l = pp2();
  l.pp = 1, l.dp = 4;
  const PlanRequest r0 = deepseek_like(0), r1 = deepseek_like(1);
  const int m = microbatches(r0, l);
  const Schedule s = make_schedule(l.schedule, l.pp, m, l.virtual_stages);
  const PlannedMemory a = planned_memory(r0, l, s), b = planned_memory(r1, l, s);
  EXPECT_GT(b.total(), a.total());
  EXPECT_GT(b.activations, a.activations);
  EXPECT_GT(b.params, a.params);
}

TEST(PlanMtp, RefusedWhereTheSoftwareHasNone) {
  PlanRequest r = deepseek_like(1);
  r.hardware = preset_profile("h800-80gb");  // meshtrain's own GPU software
  std::string msg;
  try {
    validate_request(r);
  } catch (const UsageError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("--mtp-layers 1: software meshtrain has no multi-token prediction"),
            std::string::npos)
      << msg;
  r = deepseek_like(-1);
  EXPECT_THROW(validate_request(r), UsageError);
  EXPECT_NO_THROW(validate_request(deepseek_like(1)));
}

}  // namespace
}  // namespace mt::plan
