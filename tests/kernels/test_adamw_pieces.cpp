// adamw_update_pieces (kernels/adamw.h): every piece of a step in one pass, with the bf16
// copies of the updated weights written by the same stores. It must be bit for bit
// adamw_update of each piece in turn, at any thread count (one team splits the pieces laid
// end to end, so a thread's share starts and ends inside pieces), and each copy must be
// to_bf16 of the updated weights, special values included.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <limits>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/bf16.h"
#include "kernels/kernel_harness.h"

namespace mt::test {
namespace {

struct State {
  Buf param, m, v;
};

size_t float_mismatches(const Buf& a, const Buf& b) {
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); i++) bad += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return bad;
}

TEST(AdamWPieces, OnePassEqualsPieceByPieceBitwiseWithCopies) {
  // Pieces of awkward sizes (a thread's share boundary falls inside them), decayed or not,
  // the middle ones with copies.
  const std::vector<size_t> sizes = {5, 1000, 17, 4096, 3, 333};
  const std::vector<bool> decay = {false, true, false, true, true, false};
  const std::vector<bool> copied = {false, true, true, true, false, true};
  size_t total = 0;
  for (size_t n : sizes) total += n;
  Buf param0 = random_normal(total, 90), grad = random_normal(total, 91, 0.05f);
  // Special weights the copy must round as to_bf16 does: a denormal, a tie, huge values.
  param0[1] = 1e-40f, param0[7] = 1.00390625f, param0[9] = 3e38f, param0[2000] = -1e-39f;
  const AdamWParams hp{3e-3, 0.9, 0.95, 1e-8, 0.1, 2, 0.75f};
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    omp_set_num_threads(threads);
    State a{param0, random_normal(total, 92, 0.01f), Buf(total, 1e-4f)}, b = a;
    std::vector<bf16> copy(total, bf16(0x1234));
    // Reference: adamw_update of each piece in turn, no copies.
    size_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      AdamWParams h = hp;
      h.weight_decay = decay[i] ? hp.weight_decay : 0.0;
      ASSERT_TRUE(adamw_update(a.param.data() + off, grad.data() + off, a.m.data() + off,
                               a.v.data() + off, sizes[i], h));
      off += sizes[i];
    }
    std::vector<AdamWPiece> pieces;
    off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      pieces.push_back({b.param.data() + off, grad.data() + off, b.m.data() + off, b.v.data() + off,
                        copied[i] ? copy.data() + off : nullptr, sizes[i], decay[i]});
      off += sizes[i];
    }
    ASSERT_TRUE(adamw_update_pieces(pieces, hp));
    EXPECT_EQ(float_mismatches(a.param, b.param), 0u);
    EXPECT_EQ(float_mismatches(a.m, b.m), 0u);
    EXPECT_EQ(float_mismatches(a.v, b.v), 0u);
    std::vector<bf16> expected(total);
    to_bf16(expected.data(), b.param.data(), total);
    off = 0;
    size_t wrong = 0, touched = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (size_t j = off; j < off + sizes[i]; ++j)
        copied[i] ? wrong += copy[j] != expected[j] : touched += copy[j] != bf16(0x1234);
      off += sizes[i];
    }
    EXPECT_EQ(wrong, 0u) << "copies that are not to_bf16 of the updated weights";
    EXPECT_EQ(touched, 0u) << "elements of pieces without a copy written";
  }
  omp_set_num_threads(1);
}

TEST(AdamWPieces, ReportsANonFinitePieceAmongFiniteOnes) {
  // A bad gradient in the second piece, or none: the pass reports it whichever piece holds it.
  for (bool bad : {true, false}) {
    Buf p(40, 1.0f), g(40, 0.1f), m(40, 0.0f), v(40, 0.0f);
    if (bad) g[33] = std::numeric_limits<float>::infinity();
    const std::vector<AdamWPiece> pieces = {
        {p.data(), g.data(), m.data(), v.data(), nullptr, 30, true},
        {p.data() + 30, g.data() + 30, m.data() + 30, v.data() + 30, nullptr, 10, false}};
    const AdamWParams hp{1e-3, 0.9, 0.95, 1e-8, 0.1, 1};
    EXPECT_EQ(adamw_update_pieces(pieces, hp), !bad);
  }
}

}  // namespace
}  // namespace mt::test
