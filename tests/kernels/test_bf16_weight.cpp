// The bf16 weight copies of --precision bf16 (kernels/bf16_weight.h):
// converted at the first use after the model's weight version moves, and never otherwise,
// so a step converts each weight once however many microbatches and uses it has.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bf16_weight.h"

namespace mt {
namespace {

TEST(Bf16Copy, ConvertsOncePerChange) {
  uint64_t version = 0;
  Bf16Weight copy(3, &version);
  std::vector<float> w = {1.0f, -2.5f, 1.00390625f};  // the last one rounds (a tie, to even)
  const bf16* h = copy.get(w.data());
  EXPECT_EQ(h[0], float_to_bf16(1.0f));
  EXPECT_EQ(h[1], float_to_bf16(-2.5f));
  EXPECT_EQ(h[2], float_to_bf16(1.00390625f));
  EXPECT_EQ(copy.bytes(), 3 * sizeof(bf16));
  // Without a version change the copy is reused, even from another buffer (ZeRO-3 gathers
  // into whichever buffer is free): no conversion per use.
  w[0] = 7.0f;
  std::vector<float> other = {9.0f, 9.0f, 9.0f};
  EXPECT_EQ(copy.get(w.data())[0], float_to_bf16(1.0f));
  EXPECT_EQ(copy.get(other.data())[0], float_to_bf16(1.0f));
  // After a change, the next use converts what the layer is bound to now.
  ++version;
  EXPECT_EQ(copy.get(w.data())[0], float_to_bf16(7.0f));
  EXPECT_EQ(copy.get(other.data())[0], float_to_bf16(7.0f));
}

// A copy written ahead of use (the optimizer's, train/bf16_copy_writer.h) serves the next
// version without a conversion, and only that one: a second bump (an evaluation's before the
// step's) converts again, so a copy can cost a conversion but never be stale.
TEST(Bf16Copy, WrittenAheadServesTheNextVersionOnly) {
  uint64_t version = 5;
  Bf16Weight copy(2, &version);
  std::vector<float> w = {1.0f, 2.0f};
  EXPECT_EQ(copy.get(w.data())[0], float_to_bf16(1.0f));  // converted at version 5
  w = {3.0f, 4.0f};                                       // the update
  bf16* out = copy.storage();
  out[0] = float_to_bf16(3.0f), out[1] = float_to_bf16(4.0f);
  copy.written_ahead();
  w = {-9.0f, -9.0f};  // a conversion now would read these: it must not happen
  ++version;
  EXPECT_EQ(copy.get(w.data())[0], float_to_bf16(3.0f));
  EXPECT_EQ(copy.get(w.data())[1], float_to_bf16(4.0f));
  ++version;  // a bump the writer did not foresee
  EXPECT_EQ(copy.get(w.data())[0], float_to_bf16(-9.0f));
}

}  // namespace
}  // namespace mt
