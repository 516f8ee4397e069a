// The mesh, checked exhaustively over every shape of up to 16 ranks.
#include "parallel/mesh.h"

#include <gtest/gtest.h>

#include <set>

#include "core/error.h"

namespace mt {
namespace {

std::vector<MeshShape> all_shapes(int max_world) {
  std::vector<MeshShape> shapes;
  for (int pp = 1; pp <= max_world; ++pp)
    for (int dp = 1; pp * dp <= max_world; ++dp)
      for (int tp = 1; pp * dp * tp <= max_world; ++tp)
        for (int ep = 1; ep <= dp; ++ep)
          if (dp % ep == 0) shapes.push_back({pp, dp, tp, ep});
  return shapes;
}

TEST(Mesh, WorkedExampleFromHeader) {
  Mesh m({2, 2, 2, 2}, 8);
  const MeshCoord c = m.coord(5);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(m.members(GroupKind::tp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(m.members(GroupKind::dp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(m.members(GroupKind::pp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(m.members(GroupKind::ep, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(m.members(GroupKind::ep_replica, 5), (std::vector<int>{5}));
  EXPECT_EQ(m.members(GroupKind::world, 5).size(), 8u);
}

TEST(Mesh, ExpertGroupsSplitDataParallel) {
  // dp=4, ep=2, tp=2: ep groups are dp pairs {0,1},{2,3}; replicas pair dp 0 with 2.
  Mesh m({1, 4, 2, 2}, 8);
  EXPECT_EQ(m.members(GroupKind::dp, 0), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(m.members(GroupKind::ep, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(m.members(GroupKind::ep, 4), (std::vector<int>{4, 6}));
  EXPECT_EQ(m.members(GroupKind::ep_replica, 0), (std::vector<int>{0, 4}));
  EXPECT_EQ(m.members(GroupKind::ep_replica, 3), (std::vector<int>{3, 7}));
  EXPECT_EQ(m.coord(6).ep_group, 1);
  EXPECT_EQ(m.coord(6).ep_rank, 1);
}

TEST(Mesh, RankOrderIsTpThenDpThenPp) {
  Mesh m({2, 3, 2, 1}, 12);
  EXPECT_EQ(m.rank_of(0, 0, 1), 1);
  EXPECT_EQ(m.rank_of(0, 1, 0), 2);
  EXPECT_EQ(m.rank_of(1, 0, 0), 6);
  EXPECT_EQ(m.rank_of(1, 2, 1), 11);
}

// The user-facing rules are validate_train_options' (tests/train/test_validate_options.cpp);
// the mesh keeps them as internal invariants.
TEST(Mesh, RejectsWrongSizes) {
  try {
    Mesh m({2, 3, 2, 1}, 8);
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(
        std::string(e.what()).find("--pp 2 x --dp 3 x --tp 2 = 12 ranks, but the world has 8"),
        std::string::npos);
  }
  EXPECT_THROW(Mesh({1, 4, 1, 3}, 4), RuntimeError);  // ep does not divide dp
  EXPECT_THROW(Mesh({0, 4, 1, 1}, 4), RuntimeError);
  EXPECT_THROW(Mesh({1, 4, 1, 0}, 4), RuntimeError);
  EXPECT_THROW(Mesh({1, 1, 1, 1}, 1).coord(1), RuntimeError);
}

TEST(Mesh, ExhaustiveUpTo16Ranks) {
  const GroupKind kinds[] = {GroupKind::world, GroupKind::dp, GroupKind::tp,
                             GroupKind::pp,    GroupKind::ep, GroupKind::ep_replica};
  for (const MeshShape& s : all_shapes(16)) {
    const int world = s.pp * s.dp * s.tp;
    Mesh m(s, world);
    const std::string where = "pp" + std::to_string(s.pp) + " dp" + std::to_string(s.dp) + " tp" +
                              std::to_string(s.tp) + " ep" + std::to_string(s.ep);
    for (int r = 0; r < world; ++r) {
      const MeshCoord c = m.coord(r);
      ASSERT_EQ(m.rank_of(c.pp, c.dp, c.tp), r) << where;
      ASSERT_EQ(c.ep_group * s.ep + c.ep_rank, c.dp) << where;
    }
    const int sizes[] = {world, s.dp, s.tp, s.pp, s.ep, s.dp / s.ep};
    for (int k = 0; k < 6; ++k) {
      const auto groups = m.all_groups(kinds[k]);
      ASSERT_EQ(int(groups.size()) * sizes[k], world) << where << " " << group_kind_name(kinds[k]);
      std::vector<int> seen(world, 0);
      for (const auto& g : groups) {
        ASSERT_EQ(int(g.size()), sizes[k]) << where;
        for (size_t i = 0; i < g.size(); ++i) {
          if (i > 0) {
            ASSERT_LT(g[i - 1], g[i]) << where;
          }
          ++seen[g[i]];
          // Every member reports the same group, and the group varies only its own axis.
          ASSERT_EQ(m.members(kinds[k], g[i]), g) << where;
          const MeshCoord a = m.coord(g[0]), b = m.coord(g[i]);
          switch (kinds[k]) {
            case GroupKind::dp:
              ASSERT_TRUE(a.pp == b.pp && a.tp == b.tp);
              break;
            case GroupKind::tp:
              ASSERT_TRUE(a.pp == b.pp && a.dp == b.dp);
              break;
            case GroupKind::pp:
              ASSERT_TRUE(a.dp == b.dp && a.tp == b.tp);
              break;
            case GroupKind::ep:
              ASSERT_TRUE(a.pp == b.pp && a.tp == b.tp && a.ep_group == b.ep_group);
              ASSERT_EQ(b.ep_rank, int(i));
              break;
            case GroupKind::ep_replica:
              ASSERT_TRUE(a.pp == b.pp && a.tp == b.tp && a.ep_rank == b.ep_rank);
              ASSERT_EQ(b.ep_group, int(i));
              break;
            case GroupKind::cp:  // not among kinds here (cp 1): its own tests cover it
              ASSERT_TRUE(a.pp == b.pp && a.dp == b.dp && a.tp == b.tp);
              break;
            case GroupKind::dp_cp:
              ASSERT_TRUE(a.pp == b.pp && a.tp == b.tp);
              break;
            case GroupKind::world:
              break;
          }
        }
      }
      for (int r = 0; r < world; ++r) ASSERT_EQ(seen[r], 1) << where << " rank " << r;
    }
  }
}

}  // namespace
}  // namespace mt
