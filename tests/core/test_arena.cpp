// Arena's dry mode (core/arena.h): sizes without memory, kept through resizes and moves,
// so the memory estimate's dry run of a model can read what its arenas would hold.
#include "core/arena.h"

#include <gtest/gtest.h>

#include <utility>

namespace mt {
namespace {

TEST(Arena, ADryArenaHasSizesButNoMemory) {
  // 4 TiB: allocated, this would fail or take the machine's memory.
  Arena dry(size_t(1) << 40, Arena::Mode::dry);
  EXPECT_EQ(dry.size(), size_t(1) << 40);
  EXPECT_EQ(dry.bytes(), size_t(4) << 40);
  EXPECT_EQ(dry.data(), nullptr);
  dry.zero();  // nothing to touch
  dry.resize(100);
  EXPECT_EQ(dry.size(), 100u);
  EXPECT_EQ(dry.data(), nullptr);
  Arena moved = std::move(dry);
  moved.resize(size_t(1) << 40);  // still dry after a move
  EXPECT_EQ(moved.size(), size_t(1) << 40);
  EXPECT_EQ(moved.data(), nullptr);
}

TEST(Arena, AnAllocatedArenaIsZeroed) {
  Arena a(5);
  ASSERT_NE(a.data(), nullptr);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a.data()[i], 0.f);
  a.data()[0] = 1.f;
  a.resize(3);
  EXPECT_EQ(a.data()[0], 0.f);
  a.release();
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(a.data(), nullptr);
}

}  // namespace
}  // namespace mt
