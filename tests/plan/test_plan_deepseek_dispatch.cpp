// Issue #30: DeepSeek-V3's expert dispatch as its report states it (3.2.2): node-limited
// routing (a token's rows to at most 4 nodes, each sent once over IB and forwarded over
// NVLink), the dispatch in FP8 (3.3.3), and the 20 SMs its communication kernels hold
// while the computation they hide under runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "deepseek_requests.h"
#include "plan/cost_model.h"
#include "plan/time_model.h"
#include "schedule/schedule.h"

namespace mt::plan {
namespace {

using testing::deepseek_v3_run;
using testing::deepseek_v3_stated_layout;

// ep 64 over 8 nodes, 4,096 tokens of 7168: of the 4 nodes a token picks, 7/8 are remote,
// each paid once at the NIC's busbw; the 8 rows cross NVLink; FP8 (1 + 4/128 bytes) out,
// BF16 back; the two links at once, each direction 2 log2 64 latency-bound steps.
TEST(PlanDeepSeekDispatch, NodeLimitedDispatchPaysIbOncePerRemoteNode) {
  const PlanRequest r = deepseek_v3_run(0);
  const CostContext c = make_context(r, deepseek_v3_stated_layout());
  ASSERT_EQ(c.ep.size, 64);
  ASSERT_EQ(c.ep.nodes, 8);
  const HardwareProfile& hw = r.hardware;
  const double tokens = 4096, h = 7168, fp8 = 1 + 4.0 / 128, latency = hw.inter_latency_s * 12;
  auto one_way = [&](double bytes) {
    const double ib = tokens * 3.5 * h * bytes / hw.inter_busbw;
    const double nvlink = tokens * 8 * h * bytes * 63 / 64 / hw.intra_busbw;
    return latency + std::max(ib, nvlink);
  };
  EXPECT_DOUBLE_EQ(expert_exchange_seconds(c, tokens), one_way(fp8) + one_way(2));
  // Without the node limit: every row its own all-to-all message.
  PlanRequest plain = r;
  plain.hardware.a2a_max_nodes = 0;
  const CostContext p = make_context(plain, deepseek_v3_stated_layout());
  EXPECT_DOUBLE_EQ(expert_exchange_seconds(p, tokens),
                   2 * collective_seconds(hw, Collective::all_to_all, tokens * 8 * h * 2, p.ep));
}

// The F&B pairs hide the all-to-alls under computation that runs on 112 of 132 SMs: the
// step is longer than with the SMs all computing, and no longer than with no pairing.
TEST(PlanDeepSeekDispatch, CommunicationSmsSlowTheComputationTheyHideUnder) {
  const PlanRequest r = deepseek_v3_run(0);
  const Layout l = deepseek_v3_stated_layout();
  const Schedule s = make_schedule(l.schedule, l.pp, microbatches(r, l), l.virtual_stages);
  PlanRequest all_sms = r, unpaired = r;
  all_sms.hardware.comm_sms = 0;
  unpaired.hardware.fb_a2a_overlap = false;
  const double held = predict_time(r, l, s).step_s;
  EXPECT_GT(held, predict_time(all_sms, l, s).step_s);
  EXPECT_LT(held, predict_time(unpaired, l, s).step_s);
}

}  // namespace
}  // namespace mt::plan
