// Sub-group communicators built from the mesh, used concurrently, plus byte counters.
#include <gtest/gtest.h>

#include <numeric>

#include "comm/world.h"
#include "comm_test_util.h"

namespace mt {
namespace {

TEST(LocalGroups, GroupNames) {
  EXPECT_EQ(group_name("dp", {1, 3}), "dp[1,3]");
  EXPECT_EQ(group_name("world", {0, 1, 2, 3, 4, 5, 6, 7}), "world[0..7]");
  EXPECT_EQ(group_name("tp", {0, 1, 4, 5, 6}), "tp[0,1,4..6]");
  EXPECT_EQ(group_name("pp", {5}), "pp[5]");
}

// The groups of a pp=2 x dp=2 x tp=2, ep=2 mesh (docs/contracts.md §7, spelled out here because
// comm/ sits below parallel/mesh). Every rank posts its pipeline receive first, then runs a
// tp all-reduce, a dp all-reduce and an ep all-to-all while the receive is pending; the
// matching send is issued only after those. Each sum identifies the group's members.
enum class Axis { dp, tp, pp, ep };
std::vector<int> mesh_members(Axis a, int rank) {
  const int tp = rank % 2, dp = (rank / 2) % 2, pp = rank / 4;
  auto rank_of = [](int p, int d, int t) { return (p * 2 + d) * 2 + t; };
  switch (a) {
    case Axis::dp:
    case Axis::ep:
      return {rank_of(pp, 0, tp), rank_of(pp, 1, tp)};  // ep == dp here
    case Axis::tp:
      return {rank_of(pp, dp, 0), rank_of(pp, dp, 1)};
    case Axis::pp:
      return {rank_of(0, dp, tp), rank_of(1, dp, tp)};
  }
  return {};
}

TEST(LocalGroups, MeshGroupsConcurrently) {
  run_local(8, test::test_options(), [&](CommWorld& w) {
    const int me = w.rank();
    auto member_sum = [&](Axis k) {
      auto m = mesh_members(k, me);
      return std::accumulate(m.begin(), m.end(), int64_t(0));
    };
    auto dp = w.make_group(mesh_members(Axis::dp, me), "dp");
    auto tp = w.make_group(mesh_members(Axis::tp, me), "tp");
    auto pp = w.make_group(mesh_members(Axis::pp, me), "pp");
    auto ep = w.make_group(mesh_members(Axis::ep, me), "ep");
    EXPECT_EQ(dp->name(), group_name("dp", mesh_members(Axis::dp, me)));
    EXPECT_EQ(tp->size(), 2);
    EXPECT_EQ(tp->global_rank(tp->rank()), me);

    const int other_stage = 1 - pp->rank();
    std::vector<int64_t> incoming(100, -1), outgoing(100, me);
    Work r = pp->recv(incoming.data(), 100, DType::i64, other_stage, 7);

    int64_t t = me, d = me;
    Work wt = tp->all_reduce(&t, &t, 1, DType::i64, ReduceOp::sum);
    Work wd = dp->all_reduce(&d, &d, 1, DType::i64, ReduceOp::sum);
    std::vector<int32_t> a2a_out(2, me), a2a_in(2, -1);
    size_t counts[2] = {1, 1};
    ep->all_to_all_v(a2a_out.data(), counts, a2a_in.data(), counts, DType::i32).wait();
    wt.wait();
    wd.wait();
    EXPECT_EQ(t, member_sum(Axis::tp));
    EXPECT_EQ(d, member_sum(Axis::dp));
    EXPECT_EQ(a2a_in[0], mesh_members(Axis::ep, me)[0]);
    EXPECT_EQ(a2a_in[1], mesh_members(Axis::ep, me)[1]);

    pp->send(outgoing.data(), 100, DType::i64, other_stage, 7).wait();
    r.wait();
    EXPECT_EQ(incoming[99], pp->global_rank(other_stage));
  });
}

// A rank may block in one group while its peer first completes a call in another group
// that the first rank issued earlier: only independent progress per communicator avoids
// this deadlock.
TEST(LocalGroups, DifferentCommunicatorsDoNotBlockEachOther) {
  run_local(2, test::test_options(), [&](CommWorld& w) {
    auto a = w.make_group({0, 1}, "a");
    auto b = w.make_group({0, 1}, "b");
    int32_t x = 1, y = 1;
    if (w.rank() == 0) {
      Work wa = a->all_reduce(&x, &x, 1, DType::i32, ReduceOp::sum);  // not waited yet
      b->all_reduce(&y, &y, 1, DType::i32, ReduceOp::sum).wait();
      wa.wait();
    } else {
      a->all_reduce(&x, &x, 1, DType::i32, ReduceOp::sum).wait();
      b->all_reduce(&y, &y, 1, DType::i32, ReduceOp::sum).wait();
    }
    EXPECT_EQ(x, 2);
    EXPECT_EQ(y, 2);
  });
}

// The convention the tensor-parallel code asserts on: algorithm-level bytes per rank,
// all-reduce 2(n-1)/n of the buffer, reduce-scatter/all-gather (n-1)/n of the full
// buffer, sends their size, receives nothing.
TEST(LocalGroups, ByteCounters) {
  run_local(4, test::test_options(), [&](CommWorld& w) {
    auto c = w.world();
    std::vector<float> buf(4000, 1.f), out(1000);
    c->all_reduce(buf.data(), buf.data(), 4000, DType::f32, ReduceOp::sum).wait();
    EXPECT_EQ(c->stats().bytes_sent, 2u * 3 * 4000 * 4 / 4);
    c->reset_stats();
    c->reduce_scatter(buf.data(), out.data(), 1000, DType::f32, ReduceOp::sum).wait();
    c->all_gather(out.data(), buf.data(), 1000, DType::f32).wait();
    EXPECT_EQ(c->stats().bytes_sent, 2u * 3 * 1000 * 4);
    EXPECT_EQ(c->stats().calls, 2u);
    c->reset_stats();
    const int next = (w.rank() + 1) % 4, prev = (w.rank() + 3) % 4;
    Work s = c->send(buf.data(), 10, DType::f32, next, 0);
    c->recv(out.data(), 10, DType::f32, prev, 0).wait();
    s.wait();
    EXPECT_EQ(c->stats().bytes_sent, 40u);
    EXPECT_GE(c->stats().wait_seconds, 0.0);
  });
}

}  // namespace
}  // namespace mt
