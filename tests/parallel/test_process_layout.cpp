// Where a hybrid world (--ranks-per-process K) runs each group: inside a process, one
// member per process, hierarchical, or refused as uneven; and the --print-layout report.
// The options' rules about K: tests/train/test_validate_hybrid.cpp.
#include "parallel/process_layout.h"

#include <gtest/gtest.h>

#include <string>

#include "comm/hybrid/placement.h"
#include "core/error.h"

namespace mt {
namespace {

GroupPlacement placement_of(const std::vector<GroupLayout>& all, GroupKind kind, int member) {
  for (const GroupLayout& g : all)
    if (g.kind == kind)
      for (int m : g.members)
        if (m == member) return g.placement;
  ADD_FAILURE() << "no group of kind " << group_kind_name(kind) << " holds rank " << member;
  return GroupPlacement::uneven;
}

TEST(ProcessLayout, GroupSpanCountsMembersPerProcess) {
  const hybrid::GroupSpan a = hybrid::group_span({0, 1, 2, 3}, 2);
  EXPECT_EQ(a.processes, (std::vector<int>{0, 1}));
  EXPECT_EQ(a.per_process, 2);
  const hybrid::GroupSpan b = hybrid::group_span({1, 3, 4}, 2);  // 1 in p0, 1 in p1, 1 in p2
  EXPECT_EQ(b.per_process, 1);
  EXPECT_TRUE(b.crosses_processes());
  const hybrid::GroupSpan c = hybrid::group_span({0, 2, 3}, 2);  // 1 in p0, 2 in p1
  EXPECT_TRUE(c.uneven());
  EXPECT_FALSE(hybrid::group_span({4, 5}, 3).crosses_processes() &&
               !hybrid::group_span({4, 5}, 3).uneven());
}

// dp 2 x tp 2 on 2 processes x 2: tp inside, dp one per process; dp 4: hierarchical;
// pp 2 x dp 2: dp inside, pp across.
TEST(ProcessLayout, TensorParallelStaysInsideAProcess) {
  const auto dptp = process_layout({1, 2, 2, 1}, 2);
  EXPECT_EQ(placement_of(dptp, GroupKind::tp, 0), GroupPlacement::in_process);
  EXPECT_EQ(placement_of(dptp, GroupKind::dp, 0), GroupPlacement::one_per_process);
  EXPECT_EQ(placement_of(dptp, GroupKind::world, 0), GroupPlacement::hierarchical);
  const auto dp4 = process_layout({1, 4, 1, 1}, 2);
  EXPECT_EQ(placement_of(dp4, GroupKind::dp, 3), GroupPlacement::hierarchical);
  const auto ppdp = process_layout({2, 2, 1, 1}, 2);
  EXPECT_EQ(placement_of(ppdp, GroupKind::dp, 2), GroupPlacement::in_process);
  EXPECT_EQ(placement_of(ppdp, GroupKind::pp, 1), GroupPlacement::one_per_process);
  // ep 2 inside a process (its replica group across), ep 4 hierarchical.
  const auto ep2 = process_layout({1, 4, 1, 2}, 2);
  EXPECT_EQ(placement_of(ep2, GroupKind::ep, 2), GroupPlacement::in_process);
  EXPECT_EQ(placement_of(ep2, GroupKind::ep_replica, 2), GroupPlacement::one_per_process);
  EXPECT_EQ(placement_of(process_layout({1, 4, 1, 4}, 2), GroupKind::ep, 0),
            GroupPlacement::hierarchical);
  // K = 1 is the MPI backend: every multi-rank group one member per process.
  EXPECT_EQ(placement_of(process_layout({1, 2, 2, 1}, 1), GroupKind::tp, 0),
            GroupPlacement::one_per_process);
}

TEST(ProcessLayout, UnevenPlacementsAreRefusedWithTheValuesThatWork) {
  // dp 3 x tp 2 on K = 3: dp[0,2,4] has 2 members in process 0 and 1 in process 1.
  try {
    validate_process_layout({1, 3, 2, 1}, 3);
    FAIL() << "uneven layout accepted";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("dp[0,2,4]"), std::string::npos) << m;
    EXPECT_NE(m.find("values that work for this layout: 1, 2, 6"), std::string::npos) << m;
  }
  EXPECT_THROW(process_layout({1, 4, 1, 1}, 3), UsageError);  // 3 does not divide 4
  EXPECT_NO_THROW(validate_process_layout({2, 2, 2, 1}, 4));
}

TEST(ProcessLayout, ReportNamesProcessesAndWhereEachGroupRuns) {
  const std::string r = describe_process_layout({1, 2, 2, 1}, 2);
  EXPECT_NE(r.find("4 ranks on 2 processes x 2 ranks per process"), std::string::npos) << r;
  EXPECT_NE(r.find("process 1: ranks [2,3]"), std::string::npos) << r;
  EXPECT_NE(r.find("tp[0,1]  inside a process"), std::string::npos) << r;
  EXPECT_NE(r.find("dp[0,2]  across processes (MPI), 2 processes"), std::string::npos) << r;
}

}  // namespace
}  // namespace mt
