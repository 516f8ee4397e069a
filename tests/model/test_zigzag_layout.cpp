// The zigzag layout of context parallelism (docs/contracts.md §11): rank r holds chunks r and
// 2N-1-r of 2N, the ranks' rows partition the sequence, and the causal work is balanced.
#include "model/zigzag_layout.h"

#include <gtest/gtest.h>

#include <set>

#include "core/error.h"

namespace mt {
namespace {

TEST(ZigzagLayout, TheHeaderExample) {
  EXPECT_EQ(zigzag_positions(8, 2, 0), (std::vector<int>{0, 1, 6, 7}));
  EXPECT_EQ(zigzag_positions(8, 2, 1), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(zigzag_positions(8, 4, 0), (std::vector<int>{0, 7}));
  EXPECT_EQ(zigzag_positions(8, 4, 3), (std::vector<int>{3, 4}));
  EXPECT_EQ(zigzag_positions(6, 1, 0), (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(ZigzagLayout, RanksPartitionTheSequenceWithEqualCausalWork) {
  for (int cp : {1, 2, 3, 4, 8})
    for (int T : {2 * cp, 4 * cp, 64 * cp}) {
      std::set<int> seen;
      long work0 = -1;
      for (int r = 0; r < cp; ++r) {
        const std::vector<int> pos = zigzag_positions(T, cp, r);
        ASSERT_EQ(int(pos.size()), T / cp);
        long work = 0;  // keys a causal query at position p sees: p + 1
        for (size_t i = 0; i < pos.size(); ++i) {
          EXPECT_TRUE(seen.insert(pos[i]).second) << "T " << T << " cp " << cp;
          if (i > 0 && i != pos.size() / 2) {
            EXPECT_EQ(pos[i], pos[i - 1] + 1);
          }
          work += pos[i] + 1;
        }
        if (work0 < 0) work0 = work;
        EXPECT_EQ(work, work0) << "T " << T << " cp " << cp << " rank " << r;
      }
      EXPECT_EQ(int(seen.size()), T);
      EXPECT_EQ(*seen.rbegin(), T - 1);
    }
}

TEST(ZigzagLayout, RefusesASequenceNotCutInto2NChunks) {
  EXPECT_THROW(zigzag_positions(12, 4, 0), RuntimeError);
  EXPECT_THROW(zigzag_positions(8, 2, 2), RuntimeError);
}

}  // namespace
}  // namespace mt
