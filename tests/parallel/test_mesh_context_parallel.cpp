// The mesh with context parallelism (docs/contracts.md §11): tp fastest, then cp, then dp, then
// pp; the cp groups and the dp_cp gradient groups; cp = 1 changes nothing.
#include <gtest/gtest.h>

#include <set>

#include "parallel/mesh.h"

namespace mt {
namespace {

TEST(MeshContextParallel, RankOrderIsTpThenCpThenDpThenPp) {
  const MeshShape s{2, 2, 2, 1, 2};  // pp 2, dp 2, tp 2, cp 2: 16 ranks
  const Mesh m(s, 16);
  for (int pp = 0; pp < 2; ++pp)
    for (int dp = 0; dp < 2; ++dp)
      for (int cp = 0; cp < 2; ++cp)
        for (int tp = 0; tp < 2; ++tp) {
          const int rank = ((pp * 2 + dp) * 2 + cp) * 2 + tp;
          EXPECT_EQ(m.rank_of(pp, dp, tp, cp), rank);
          const MeshCoord c = m.coord(rank);
          EXPECT_EQ(c.pp, pp);
          EXPECT_EQ(c.dp, dp);
          EXPECT_EQ(c.cp, cp);
          EXPECT_EQ(c.tp, tp);
        }
}

TEST(MeshContextParallel, GroupsOfTheHeaderExample) {
  // pp 1, dp 2, tp 1, cp 2 (mesh.h): cp groups [0,1] [2,3], dp groups [0,2] [1,3].
  const Mesh m({1, 2, 1, 1, 2}, 4);
  EXPECT_EQ(m.members(GroupKind::cp, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(m.members(GroupKind::cp, 3), (std::vector<int>{2, 3}));
  EXPECT_EQ(m.members(GroupKind::dp, 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(m.members(GroupKind::dp_cp, 2), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(m.members(GroupKind::tp, 2), (std::vector<int>{2}));
}

TEST(MeshContextParallel, WithTensorParallelTheCpGroupSkipsTheTpRanks) {
  const Mesh m({1, 1, 2, 1, 4}, 8);  // tp 2, cp 4
  EXPECT_EQ(m.members(GroupKind::tp, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(m.members(GroupKind::cp, 3), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(m.members(GroupKind::dp_cp, 4), (std::vector<int>{0, 2, 4, 6}));
}

TEST(MeshContextParallel, EveryKindPartitionsTheWorld) {
  const Mesh m({2, 2, 2, 1, 3}, 24);
  for (GroupKind k :
       {GroupKind::cp, GroupKind::dp_cp, GroupKind::dp, GroupKind::tp, GroupKind::pp}) {
    std::set<int> seen;
    for (const auto& g : m.all_groups(k))
      for (int r : g) EXPECT_TRUE(seen.insert(r).second) << group_kind_name(k) << " rank " << r;
    EXPECT_EQ(seen.size(), 24u) << group_kind_name(k);
  }
}

// Experts under cp (§9a, §11): the ep group stays inside one cp index (it exchanges that cp
// index's tokens); the expert replicas span every cp index (each cp rank's expert gradients
// cover its own rows only), so together they cover dp_cp.
TEST(MeshContextParallel, EpGroupsStayInACpIndexAndReplicasSpanCp) {
  const Mesh m({1, 2, 1, 2, 2}, 4);  // dp 2, ep 2, cp 2 (mesh.h's example)
  EXPECT_EQ(m.members(GroupKind::ep, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(m.members(GroupKind::ep, 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(m.members(GroupKind::ep_replica, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(m.members(GroupKind::ep_replica, 3), (std::vector<int>{2, 3}));
  const Mesh big({2, 4, 2, 2, 3}, 48);  // pp 2, dp 4, tp 2, ep 2, cp 3
  for (int r = 0; r < 48; ++r) {
    const MeshCoord c = big.coord(r);
    for (int q : big.members(GroupKind::ep, r)) {
      const MeshCoord d = big.coord(q);
      EXPECT_TRUE(d.cp == c.cp && d.pp == c.pp && d.tp == c.tp && d.ep_group == c.ep_group);
    }
    const std::vector<int> replicas = big.members(GroupKind::ep_replica, r);
    EXPECT_EQ(replicas.size(), 2u * 3u);  // dp / ep groups x cp
    for (int q : replicas) {
      const MeshCoord d = big.coord(q);
      EXPECT_TRUE(d.pp == c.pp && d.tp == c.tp && d.ep_rank == c.ep_rank);
    }
  }
  std::set<int> seen;
  for (const auto& g : big.all_groups(GroupKind::ep_replica))
    for (int r : g) EXPECT_TRUE(seen.insert(r).second) << r;
  EXPECT_EQ(seen.size(), 48u);
}

TEST(MeshContextParallel, CpOneIsTheCpLessMesh) {
  const Mesh a({2, 3, 2, 1}, 12), b({2, 3, 2, 1, 1}, 12);
  for (int r = 0; r < 12; ++r) {
    EXPECT_EQ(a.coord(r).dp, b.coord(r).dp);
    EXPECT_EQ(b.coord(r).cp, 0);
    EXPECT_EQ(b.members(GroupKind::dp_cp, r), a.members(GroupKind::dp, r));
  }
}

}  // namespace
}  // namespace mt
