// Schedule generators, validator and simulator: every generator over a sweep of sizes is
// valid, and the simulated bubble matches the closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "schedule/schedule.h"
#include "schedule/schedule_simulator.h"
#include "schedule/schedule_validator.h"

namespace mt {
namespace {

// Unit-cost bubble of a fused-backward schedule is (p-1)/(m+p-1) when F = B = W: one
// microbatch costs F+B+W = 3 on every stage; the pipe takes (p-1) such slots to fill and
// drain, so makespan = 3(m+p-1), busy = 3m per stage.
TEST(Schedule, EveryGeneratorIsValidOverTheSweep) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m)
      for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
        const Schedule s = make_schedule(name, p, m, 1);
        const ValidationReport r = validate_schedule(s);
        ASSERT_TRUE(r.ok()) << name << " p=" << p << " m=" << m << "\n" << r.summary();
      }
}

TEST(Schedule, InterleavedIsValidWhereMicrobatchesDivide) {
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 16; m += p)
      for (int v = 2; v <= 3; ++v) {
        const Schedule s = make_schedule("interleaved", p, m, v);
        const ValidationReport r = validate_schedule(s);
        ASSERT_TRUE(r.ok()) << "p=" << p << " m=" << m << " v=" << v << "\n" << r.summary();
      }
}

// Equal costs are the tested claim; with no latency the forms also hold for unequal ones
// (fill and drain each take (p-1) slots of F + B + W whatever the split), checked too.
TEST(Schedule, BubbleMatchesClosedForm) {
  for (const OpCosts& c : {OpCosts{}, OpCosts{1, 2, 1, 0}, OpCosts{2, 1, 0.5, 0}})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m) {
        for (const char* name : {"gpipe", "1f1b"}) {
          const Timeline t = simulate_schedule(make_schedule(name, p, m, 1), c);
          EXPECT_NEAR(t.bubble(), closed_form_bubble(schedule_kind(name), p, m, 1), 1e-12)
              << name << " p=" << p << " m=" << m;
        }
        if (m % p) continue;
        for (int v = 2; v <= 3; ++v) {
          const Timeline t = simulate_schedule(make_schedule("interleaved", p, m, v), c);
          EXPECT_NEAR(t.bubble(), closed_form_bubble(ScheduleKind::interleaved, p, m, v), 1e-12)
              << "interleaved p=" << p << " m=" << m << " v=" << v;
        }
      }
}

TEST(Schedule, ZeroBubbleH1IdlesAThirdOf1F1B) {
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 16; ++m) {
      const Timeline zb = simulate_schedule(make_schedule("zb-h1", p, m, 1), OpCosts{});
      const Timeline ob = simulate_schedule(make_schedule("1f1b", p, m, 1), OpCosts{});
      EXPECT_LE(zb.total_idle(), ob.total_idle() / 3 + 1e-9) << "p=" << p << " m=" << m;
    }
}

TEST(Schedule, WarmupCountsAreThePapers) {
  // 1F1B: stage s runs p-1-s forwards before its first backward (capped at m).
  const Schedule s = schedule_1f1b(4, 8);
  for (int st = 0; st < 4; ++st) {
    int forwards = 0;
    for (const Action& a : s.actions[st]) {
      if (a.kind == ActionKind::B) break;
      forwards += a.kind == ActionKind::F;
    }
    EXPECT_EQ(forwards, 4 - 1 - st + 1) << "stage " << st;  // warmup + the steady F
  }
  // Interleaved: local chunk c of stage s is model chunk c*p+s, so chunk 1 of stage 0
  // receives its activation from stage p-1 (the wrap-around).
  const Schedule il = schedule_interleaved(4, 8, 2);
  EXPECT_EQ(il.model_chunk(0, 1), 4);
  bool wrap = false;
  for (const Action& a : il.actions[0])
    wrap = wrap || (a.kind == ActionKind::RECV_ACT && a.chunk == 1 && a.peer == 3);
  EXPECT_TRUE(wrap);
}

TEST(Schedule, PeakInFlightIsTheActivationMemory) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      const auto gpipe = validate_schedule(schedule_gpipe(p, m)).peak_in_flight;
      const auto ofob = validate_schedule(schedule_1f1b(p, m)).peak_in_flight;
      const auto zb = validate_schedule(schedule_zb_h1(p, m)).peak_in_flight;
      for (int st = 0; st < p; ++st) {
        EXPECT_EQ(gpipe[st], m);
        EXPECT_EQ(ofob[st], std::min(p - st, m)) << "1f1b p=" << p << " m=" << m;
        EXPECT_LE(zb[st], std::min(p, m)) << "zb-h1 p=" << p << " m=" << m;
      }
      EXPECT_EQ(zb[0], std::min(p, m));
    }
}

TEST(Schedule, ZeroBubbleH1IsExactlyThePapersBubble) {
  // (p-1)(F+B-W) idle per stage when m >= p and F = B = W (= 2 here): p(p-1)*2 in all.
  for (int p = 2; p <= 6; ++p) {
    const Timeline t = simulate_schedule(schedule_zb_h1(p, 2 * p), OpCosts{2, 2, 2, 0});
    EXPECT_NEAR(t.total_idle(), p * (p - 1) * 2.0, 1e-9) << "p=" << p;
    EXPECT_NEAR(t.makespan, 2 * p * 6.0 + (p - 1) * 2.0, 1e-9) << "p=" << p;
  }
  // With unequal costs it is no longer exact, but still far below 1F1B.
  for (const OpCosts& c : {OpCosts{1, 2, 1.5, 0}, OpCosts{1, 1, 0.5, 0}, OpCosts{2, 1, 1, 0}}) {
    const double zb = simulate_schedule(schedule_zb_h1(4, 8), c).total_idle();
    const double ofob = simulate_schedule(schedule_1f1b(4, 8), c).total_idle();
    EXPECT_LT(zb, 0.75 * ofob) << c.forward << "," << c.backward << "," << c.weight;
  }
}

TEST(Schedule, LatencyDelaysEveryHop) {
  // One microbatch through 4 stages: 3 hops down and 3 back up, each `latency` long.
  const Schedule s = schedule_1f1b(4, 1);
  EXPECT_NEAR(simulate_schedule(s, OpCosts{1, 1, 1, 0}).makespan, 12, 1e-9);
  EXPECT_NEAR(simulate_schedule(s, OpCosts{1, 1, 1, 0.5}).makespan, 12 + 6 * 0.5, 1e-9);
}

TEST(Schedule, BadSizesAreUsageErrors) {
  EXPECT_THROW(make_schedule("interleaved", 4, 6, 2), UsageError);  // 6 % 4 != 0
  EXPECT_THROW(make_schedule("interleaved", 4, 8, 1), UsageError);
  EXPECT_THROW(make_schedule("1f1b", 4, 8, 2), UsageError);
  EXPECT_THROW(make_schedule("2f2b", 4, 8, 1), UsageError);
  EXPECT_THROW(make_schedule("gpipe", 0, 8, 1), UsageError);
  EXPECT_THROW(make_schedule("zb-h1", 2, 0, 1), UsageError);
  try {
    make_schedule("interleaved", 4, 6, 2);
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--microbatches"), std::string::npos) << e.what();
  }
}

// The validator must catch each kind of broken schedule.
bool mentions(const ValidationReport& r, const std::string& what) {
  for (const auto& e : r.errors)
    if (e.find(what) != std::string::npos) return true;
  return false;
}

TEST(ScheduleValidator, CatchesAMissingAction) {
  Schedule s = schedule_1f1b(2, 2);
  auto& l = s.actions[1];
  l.erase(std::find(l.begin(), l.end(), Action{ActionKind::B, 1, 0, -1}));
  const auto r = validate_schedule(s);
  EXPECT_TRUE(mentions(r, "missing B1")) << r.summary();
  EXPECT_TRUE(mentions(r, "SEND_GRAD(1.0->0) runs before B1")) << r.summary();
}

TEST(ScheduleValidator, CatchesADuplicateAndAStrayW) {
  Schedule s = schedule_1f1b(2, 2);
  s.actions[0].push_back({ActionKind::F, 0, 0, -1});
  s.actions[1].push_back({ActionKind::W, 0, 0, -1});
  const auto r = validate_schedule(s);
  EXPECT_TRUE(mentions(r, "more than once")) << r.summary();
  EXPECT_TRUE(mentions(r, "fused backward")) << r.summary();
}

TEST(ScheduleValidator, CatchesBackwardBeforeForward) {
  Schedule s = schedule_gpipe(1, 2);  // F0 F1 B0 B1
  std::swap(s.actions[0][0], s.actions[0][2]);
  EXPECT_TRUE(mentions(validate_schedule(s), "B0 runs before F0"));
}

TEST(ScheduleValidator, CatchesWBeforeB) {
  Schedule s = schedule_zb_h1(1, 1);  // F0 B0 W0
  std::swap(s.actions[0][1], s.actions[0][2]);
  EXPECT_TRUE(mentions(validate_schedule(s), "W0 runs before B0"));
}

TEST(ScheduleValidator, CatchesAWrongPeer) {
  Schedule s = schedule_1f1b(3, 1);
  auto& l = s.actions[1];  // RECV_ACT F SEND_ACT RECV_GRAD B SEND_GRAD
  ASSERT_EQ(l[2].kind, ActionKind::SEND_ACT);
  l[2].peer = 0;
  const auto r = validate_schedule(s);
  EXPECT_TRUE(mentions(r, "SEND_ACT(0.0->0) has no such peer")) << r.summary();
}

TEST(ScheduleValidator, CatchesAnUnpairedSend) {
  Schedule s = schedule_1f1b(3, 1);
  auto& l = s.actions[2];  // RECV_ACT F B SEND_GRAD
  ASSERT_EQ(l[0].kind, ActionKind::RECV_ACT);
  l.erase(l.begin());
  const auto r = validate_schedule(s);
  EXPECT_TRUE(mentions(r, "activation of microbatch 0 for model chunk 2: 1 send(s), 0 receive"))
      << r.summary();
  EXPECT_TRUE(mentions(r, "F0 runs before RECV_ACT(0.0<-1)")) << r.summary();
}

TEST(ScheduleValidator, CatchesADeadlock) {
  // Stage 0 waits for the gradient before sending the activation that produces it.
  Schedule s = schedule_1f1b(2, 1);
  auto& l = s.actions[0];  // F0 SEND_ACT RECV_GRAD B0
  ASSERT_EQ(l[1].kind, ActionKind::SEND_ACT);
  std::swap(l[1], l[2]);
  const auto r = validate_schedule(s);
  ASSERT_EQ(r.errors.size(), 1u) << r.summary();
  EXPECT_TRUE(mentions(r, "deadlock: stage 0 waits at RECV_GRAD(0.0<-1)")) << r.summary();
  EXPECT_TRUE(mentions(r, "stage 1 waits at RECV_ACT(0.0<-0)")) << r.summary();
  EXPECT_THROW(require_valid_schedule(s), RuntimeError);
}

}  // namespace
}  // namespace mt
