// Hangs and failures on the local backend end the run promptly with a message naming the
// culprit; mismatched collectives are reported instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "comm/fault.h"
#include "comm/world.h"
#include "comm_test_util.h"
#include "core/error.h"
#include "core/timer.h"

namespace mt {
namespace {

std::string run_and_catch(int n, const WorldOptions& o, const RankMain& fn) {
  try {
    run_local(n, o, fn);
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LocalFaults, TimeoutNamesOpGroupSequenceAndMissingRank) {
  Stopwatch sw;
  const std::string msg = run_and_catch(4, test::test_options(0.3), [](CommWorld& w) {
    auto c = w.world();
    int32_t x = 1;
    c->all_reduce(&x, &x, 1, DType::i32, ReduceOp::sum).wait();  // #0 completes
    if (w.rank() == 2) return;                                   // never calls #1
    c->all_reduce(&x, &x, 1, DType::i32, ReduceOp::sum).wait();
  });
  EXPECT_LT(sw.elapsed(), 20.0);
  EXPECT_NE(msg.find("all_reduce #1 on group world[0..3]: rank 2 did not arrive within 0.3 s"),
            std::string::npos)
      << msg;
}

TEST(LocalFaults, RecvTimeoutNamesSender) {
  const std::string msg = run_and_catch(2, test::test_options(0.2), [](CommWorld& w) {
    float x = 0;
    if (w.rank() == 1) w.world()->recv(&x, 1, DType::f32, 0, 5).wait();
  });
  EXPECT_NE(msg.find("rank 1: recv #0 from rank 0 (tag 5) on group world[0,1]: rank 0 did not "
                     "send within 0.2 s"),
            std::string::npos)
      << msg;
}

// One rank throws while the others wait in a collective (and on a pending receive): they
// must stop well before the (long) timeout, each naming the failed rank, and run_local
// rethrows the root cause.
TEST(LocalFaults, RankFailureStopsOthersPromptly) {
  std::mutex mu;
  std::vector<std::string> others;
  Stopwatch sw;
  const std::string msg = run_and_catch(4, test::test_options(60), [&](CommWorld& w) {
    auto c = w.world();
    int32_t x = 1;
    c->all_reduce(&x, &x, 1, DType::i32, ReduceOp::sum).wait();
    if (w.rank() == 3) throw RuntimeError("rank 3: injected fault at step 2");
    try {
      float y;
      Work r = c->recv(&y, 1, DType::f32, 3, 0);
      c->all_reduce(&x, &x, 1, DType::i32, ReduceOp::sum).wait();
      r.wait();
    } catch (const RuntimeError& e) {
      std::lock_guard lock(mu);
      others.push_back(e.what());
      throw;
    }
  });
  EXPECT_LT(sw.elapsed(), 10.0);
  EXPECT_EQ(msg, "rank 3: injected fault at step 2");
  ASSERT_EQ(others.size(), 3u);
  for (const auto& m : others) EXPECT_NE(m.find("rank 3 failed"), std::string::npos) << m;
}

// A rank that throws with a call still pending on a communicator (destroyed while the
// exception unwinds) must not leave the peers waiting for the timeout either.
TEST(LocalFaults, FailureWithPendingCallDoesNotWaitForTimeout) {
  Stopwatch sw;
  const std::string msg = run_and_catch(2, test::test_options(60), [&](CommWorld& w) {
    auto g = w.make_group({0, 1}, "g");
    int32_t x = 1, y = 1;
    if (w.rank() == 0) {
      Work pending = g->all_reduce(&x, &x, 1, DType::i32, ReduceOp::sum);
      throw std::runtime_error("boom");
    }
    w.world()->all_reduce(&y, &y, 1, DType::i32, ReduceOp::sum).wait();
  });
  EXPECT_LT(sw.elapsed(), 10.0);
  EXPECT_EQ(msg, "rank 0: boom");
}

TEST(LocalFaults, UsageErrorKeepsItsType) {
  EXPECT_THROW(run_local(3, test::test_options(),
                         [](CommWorld& w) {
                           if (w.rank() == 1) throw UsageError("--dp 3 does not divide the batch");
                           w.world()->barrier().wait();
                         }),
               UsageError);
}

TEST(LocalFaults, AbortNamesRank) {
  const std::string msg = run_and_catch(3, test::test_options(60), [](CommWorld& w) {
    if (w.rank() == 2) {
      w.abort("out of memory");
      return;
    }
    w.world()->barrier().wait();
  });
  EXPECT_EQ(msg, "rank 2: out of memory");
}

// What MESHTRAIN_CHECK_COLLECTIVES=1 asks for: the first disagreement is reported.
TEST(LocalFaults, MismatchedCollectiveIsReported) {
  WorldOptions o = test::test_options(60);
  o.check_collectives = true;
  std::string msg = run_and_catch(2, o, [](CommWorld& w) {
    std::vector<float> v(16, 1.f);
    const size_t count = w.rank() == 0 ? 10 : 12;
    w.world()->all_reduce(v.data(), v.data(), count, DType::f32, ReduceOp::sum).wait();
  });
  EXPECT_NE(msg.find("all_reduce #0 on group world[0,1]: mismatched collective: rank 0 called "
                     "all_reduce(count 10, f32, sum) but rank 1 called all_reduce(count 12, "
                     "f32, sum)"),
            std::string::npos)
      << msg;
  msg = run_and_catch(3, o, [](CommWorld& w) {
    std::vector<float> v(16, 1.f);
    if (w.rank() == 1) {
      w.world()->broadcast(v.data(), 16, DType::f32, 0).wait();
    } else {
      w.world()->barrier().wait();
    }
  });
  EXPECT_NE(msg.find("rank 0 called barrier() but rank 1 called broadcast(count 16, f32, root 0)"),
            std::string::npos)
      << msg;
}

TEST(LocalFaults, MismatchedAllToAllCounts) {
  const std::string msg = run_and_catch(2, test::test_options(60), [](CommWorld& w) {
    std::vector<float> in(8), out(8);
    size_t sc[2] = {2, 2}, rc[2] = {2, size_t(w.rank() == 1 ? 3 : 2)};
    w.world()->all_to_all_v(in.data(), sc, out.data(), rc, DType::f32).wait();
  });
  EXPECT_NE(msg.find("rank 1 sends 2 elements to rank 1, which expects 3"), std::string::npos)
      << msg;
}

TEST(FaultSpec, Parse) {
  const FaultSpec s = parse_fault_spec("rank:3:step:17");
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.step, 17);
  EXPECT_FALSE(parse_fault_spec("").enabled());
  for (const char* bad : {"rank:3", "rank:x:step:1", "rank:-1:step:2", "step:1:rank:2",
                          "rank:1:step:2:", "rank:1:step:"})
    EXPECT_THROW(parse_fault_spec(bad), UsageError) << bad;
}

TEST(FaultSpec, InjectsOnTheChosenRankAndStepOnly) {
  const FaultSpec spec = parse_fault_spec("rank:1:step:2");
  const std::string msg = run_and_catch(2, test::test_options(60), [&](CommWorld& w) {
    for (int step = 0; step < 4; ++step) {
      maybe_inject_fault(spec, w.rank(), step, w);
      w.world()->barrier().wait();
    }
  });
  EXPECT_EQ(msg, "rank 1: injected fault at step 2");
}

}  // namespace
}  // namespace mt
