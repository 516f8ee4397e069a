// DualPipeV (schedule_dualpipev.cpp): the V placement, every size it accepts valid and
// deadlock-free, the sizes it refuses, its overlapped F&B pairs, memory and bubble against
// zb-h1 and the DualPipe paper.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "schedule/execution_order.h"
#include "schedule/schedule.h"
#include "schedule/schedule_simulator.h"
#include "schedule/schedule_validator.h"

namespace mt {
namespace {

TEST(DualPipeV, PlacesTheChunksInAV) {
  for (int p = 1; p <= 8; ++p) {
    const Schedule s = schedule_dualpipev(p, 2 * p);
    EXPECT_EQ(s.chunks, 2);
    EXPECT_EQ(s.placement, ChunkPlacement::v_shape);
    for (int st = 0; st < p; ++st) {
      EXPECT_EQ(s.model_chunk(st, 0), st);
      EXPECT_EQ(s.model_chunk(st, 1), 2 * p - 1 - st);
      for (int c = 0; c < 2; ++c) {
        EXPECT_EQ(s.stage_of(s.model_chunk(st, c)), st);
        EXPECT_EQ(s.local_chunk_of(s.model_chunk(st, c)), c);
      }
    }
    // The embedding (model chunk 0) and the head (the last) share stage 0.
    EXPECT_EQ(s.stage_of(0), 0);
    EXPECT_EQ(s.stage_of(2 * p - 1), 0);
  }
}

TEST(DualPipeV, EverySizeItAcceptsIsValidAndDeadlockFree) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 2 * p; m <= 4 * p + 5; ++m) {
      EXPECT_NO_THROW(check_schedule_args("dualpipev", p, m, 1));
      const Schedule s = make_schedule("dualpipev", p, m, 2);
      const ValidationReport r = validate_schedule(s);
      ASSERT_TRUE(r.ok()) << "p=" << p << " m=" << m << "\n" << r.summary();
      for (const OpCosts& c : {OpCosts{}, OpCosts{1, 2, 1, 0.5}, OpCosts{2, 1, 0.5, 0, 1}})
        ASSERT_FALSE(simulate_schedule(s, c).deadlocked) << "p=" << p << " m=" << m;
    }
}

TEST(DualPipeV, RefusedSizesSayWhy) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m < 2 * p; ++m) {
      try {
        check_schedule_args("dualpipev", p, m, 1);
        ADD_FAILURE() << "p=" << p << " m=" << m << " accepted";
      } catch (const UsageError& e) {
        EXPECT_NE(
            std::string(e.what()).find(str("--microbatches (", m, ") >= 2 x --pp (", 2 * p, ")")),
            std::string::npos)
            << e.what();
      }
      EXPECT_THROW(make_schedule("dualpipev", p, m, 2), UsageError);
      EXPECT_THROW(schedule_dualpipev(p, m), UsageError);
    }
  for (int v : {0, 3, 4}) {
    try {
      check_schedule_args("dualpipev", 4, 8, v);
      ADD_FAILURE() << "--virtual-stages " << v << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("places 2 chunks on every stage"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(chunks_per_stage(ScheduleKind::dualpipev, 1), 2);
  EXPECT_EQ(chunks_per_stage(ScheduleKind::interleaved, 3), 3);
  EXPECT_EQ(placement_of(ScheduleKind::zb_h1), ChunkPlacement::interleaved);
}

// Once both chunks are full every stage pairs an F with a B of the other chunk: m - 2p + s
// + 1 steady pairs each way (less the bottom stage's first) and p - 1 - s in the cooldown.
TEST(DualPipeV, PairsForwardsWithBackwardsOfTheOtherChunk) {
  const int p = 4, m = 10;
  const Schedule s = schedule_dualpipev(p, m);
  for (int st = 0; st < p; ++st) {
    int pairs = 0;
    for (const Action& a : s.actions[st]) {
      if (a.kind != ActionKind::FB) continue;
      ++pairs;
      EXPECT_NE(a.chunk, a.b_chunk) << to_string(a);
      EXPECT_NE(a.microbatch, -1);
    }
    const int steady = m - 2 * p + st + 1, below = p - 1 - st;
    EXPECT_EQ(pairs, 2 * steady - (below == 0 ? 1 : 0) + below) << "stage " << st;
  }
  EXPECT_EQ(to_string(Action{ActionKind::FB, 3, 0, -1, 1, 1}), "F3&B1.1");
}

// The execution order moves the B half's receive after the F half and the F half's send
// before the B half; nothing else moves.
TEST(DualPipeV, ExecutionOrderOverlapsEachHalfsTransfersWithTheOtherHalf) {
  const Schedule s = schedule_dualpipev(4, 8);
  for (int st = 0; st < 4; ++st) {
    const auto& list = s.actions[st];
    const std::vector<ExecStep> order = execution_order(s, st);
    size_t halves = 0, moved = 0;
    std::vector<int> seen(list.size(), 0);
    for (size_t i = 0; i < order.size(); ++i) {
      const ExecStep& e = order[i];
      seen[size_t(e.index)] += 1;
      halves += e.half != Half::whole;
      if (!e.inside_fb) continue;
      ++moved;
      ASSERT_GT(i, 0u);
      ASSERT_LT(i + 1, order.size());
      const Action& a = list[size_t(e.index)];
      // Between the halves of one FB: the F half's send, then the B half's receive.
      size_t f = i, b = i;
      while (order[f].half != Half::forward) --f;
      while (order[b].half != Half::backward) ++b;
      EXPECT_EQ(order[f].index, order[b].index);
      const Action& fb = list[size_t(order[f].index)];
      const bool f_send =
          a.kind == ActionKind::SEND_ACT && a.microbatch == fb.microbatch && a.chunk == fb.chunk;
      const bool b_recv = a.kind == ActionKind::RECV_GRAD && a.microbatch == fb.b_microbatch &&
                          a.chunk == fb.b_chunk;
      EXPECT_TRUE(f_send || b_recv) << to_string(a) << " in " << to_string(fb);
    }
    int fbs = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      fbs += list[i].kind == ActionKind::FB;
      EXPECT_EQ(seen[i], list[i].kind == ActionKind::FB ? 2 : 1) << to_string(list[i]);
    }
    EXPECT_EQ(halves, size_t(2 * fbs));
    EXPECT_GT(moved, 0u) << "stage " << st;
  }
}

// 2p + 1 (microbatch, chunk) pairs, the DualPipe table's PP + 1 for PP = 2p chunk stages:
// each pair is half a stage, so p + 1/2 stage-microbatches against zb-h1's p.
TEST(DualPipeV, HoldsAtMostTwoPPlusOneChunkActivations) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 2 * p; m <= 4 * p + 5; ++m) {
      const ValidationReport r = validate_schedule(schedule_dualpipev(p, m));
      for (int st = 0; st < p; ++st) EXPECT_EQ(r.peak_in_flight[st], 2 * p + 1) << p << " " << m;
    }
}

// Per-chunk costs F = B = W = 1 are a stage's 2, 2, 2: the same work as zb-h1 at (2, 2, 2).
TEST(DualPipeV, BubbleIsBelowZbH1AndIdlesPMinusOneChunkUnits) {
  for (int p = 2; p <= 8; ++p)
    for (int m = 2 * p; m <= 4 * p; ++m) {
      const Timeline dv = simulate_schedule(schedule_dualpipev(p, m), OpCosts{1, 1, 1, 0});
      const Timeline zb = simulate_schedule(schedule_zb_h1(p, m), OpCosts{2, 2, 2, 0});
      EXPECT_LT(dv.bubble(), zb.bubble()) << "p=" << p << " m=" << m;
      for (int st = 0; st < p; ++st) {
        EXPECT_NEAR(dv.busy[st], 6.0 * m, 1e-9);
        EXPECT_NEAR(dv.idle(st), p - 1, 1e-9) << "p=" << p << " m=" << m << " stage " << st;
        EXPECT_NEAR(zb.idle(st), 2.0 * (p - 1), 1e-9);  // (p-1)(F+B-W)
      }
    }
  // Below zb-h1 with unequal costs too.
  for (const OpCosts& c : {OpCosts{1, 2, 1, 0}, OpCosts{2, 1, 0.5, 0}, OpCosts{1, 1.5, 0.5, 0}}) {
    const OpCosts stage{2 * c.forward, 2 * c.backward, 2 * c.weight, 0};
    EXPECT_LT(simulate_schedule(schedule_dualpipev(4, 8), c).bubble(),
              simulate_schedule(schedule_zb_h1(4, 8), stage).bubble())
        << c.forward << "," << c.backward << "," << c.weight;
  }
}

// The paper's (PP/2-1)(F&B + B - 3W) with B the full backward and F&B = F + B + W (the
// halves in turn): 2(p-1) at unit costs, twice what the schedule idles; with the halves
// fully overlapped (F&B = max(F, B) + W = 2) it is p - 1, the simulator's figure for the
// halves in turn. An estimate to compare with, stated as such.
TEST(DualPipeV, PapersFormulaForOurCosts) {
  for (int p = 1; p <= 8; ++p) {
    EXPECT_NEAR(dualpipe_paper_idle(p, OpCosts{1, 1, 1, 0}), 2.0 * (p - 1), 1e-12);
    EXPECT_NEAR(dualpipe_paper_idle(p, OpCosts{1, 1, 1, 0, 1}), p - 1.0, 1e-12);
    EXPECT_NEAR(dualpipe_paper_idle(p, OpCosts{1, 2, 1, 0}), (p - 1) * 4.0, 1e-12);
  }
}

// fb_overlap lets a B half start before its F half ends: busy time shrinks by the overlap
// and the makespan with it; 0 is the sequential engine.
TEST(DualPipeV, OverlappedHalvesShortenThePairs) {
  const Schedule s = schedule_dualpipev(4, 8);
  const Timeline seq = simulate_schedule(s, OpCosts{1, 1, 1, 0, 0});
  const Timeline half = simulate_schedule(s, OpCosts{1, 1, 1, 0, 0.5});
  const Timeline full = simulate_schedule(s, OpCosts{1, 1, 1, 0, 1});
  EXPECT_LT(half.makespan, seq.makespan);
  EXPECT_LT(full.makespan, half.makespan);
  int fbs = 0;
  for (const Action& a : s.actions[0]) fbs += a.kind == ActionKind::FB;
  EXPECT_NEAR(seq.busy[0] - full.busy[0], fbs * 1.0, 1e-9);  // each pair hides one unit
  for (const TimedAction& ta : full.stages[0]) {
    if (s.actions[0][size_t(ta.index)].kind == ActionKind::FB) {
      EXPECT_LE(ta.b_start, ta.f_end);
      EXPECT_GE(ta.b_start, ta.start);
    }
  }
  for (const TimedAction& ta : seq.stages[0]) {
    if (s.actions[0][size_t(ta.index)].kind == ActionKind::FB) {
      EXPECT_GE(ta.b_start, ta.f_end);
    }
  }
}

// A pair cannot hold the forward and the backward of the same (microbatch, chunk).
TEST(DualPipeV, ValidatorRefusesAPairOfOneMicrobatchAndChunk) {
  Schedule s = schedule_dualpipev(1, 2);
  for (Action& a : s.actions[0])
    if (a.kind == ActionKind::FB) {
      a.b_microbatch = a.microbatch, a.b_chunk = a.chunk;
      break;
    }
  const ValidationReport r = validate_schedule(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.summary().find("runs before"), std::string::npos) << r.summary();
}

}  // namespace
}  // namespace mt
