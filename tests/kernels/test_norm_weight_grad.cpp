// The norms' weight gradients (layernorm_backward_weight: dweight and dbias;
// rmsnorm_backward_weight: dweight) sum each column over the rows in order n = 0 .. N-1 from
// 0 and then add the sum: threads own contiguous column ranges read row after row (stop 45;
// before, 64-column blocks walked down the rows). Bit for bit that order at 1-3 threads,
// through the column chunks (C over 1024 and 2048) and ranges not a multiple of 16 wide. The
// values span many magnitudes, so another order gives other bits (checked: reversed does).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>

#include "kernels/kernel_harness.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"

namespace mt::test {
namespace {

struct Inputs {
  Buf x, dy, mean, rstd, dw0, db0;
};

Inputs make_inputs(int N, int C) {
  Inputs in{random_normal(size_t(N) * C, 71),
            random_normal(size_t(N) * C, 72),
            random_normal(N, 73),
            random_normal(N, 74),
            random_normal(C, 75),
            random_normal(C, 76)};
  const Buf z = random_normal(in.dy.size(), 77);
  for (size_t i = 0; i < in.dy.size(); i++) in.dy[i] *= std::exp(3.0f * z[i]);
  for (float& s : in.rstd) s = 1.0f + 0.1f * s;
  return in;
}

// Where the build has FMA the kernels' vectorised loops contract `+= dy * xhat` to a fused
// multiply-add (one rounding), elsewhere a product and a sum.
float add_product(float acc, float a, float b) {
#if defined(__FMA__)
  return std::fma(a, b, acc);
#else
  return acc + a * b;
#endif
}

// The contract's order, one column at a time (reversed: the rows from the last).
void ordered(const Inputs& in, int N, int C, bool rms, bool reversed, Buf& dw, Buf& db) {
  dw = in.dw0, db = in.db0;
  for (int c = 0; c < C; c++) {
    float w = 0.0f, b = 0.0f;
    for (int i = 0; i < N; i++) {
      const int n = reversed ? N - 1 - i : i;
      const size_t k = size_t(n) * C + c;
      if (rms) {
        w = add_product(w, in.dy[k], in.x[k] * in.rstd[n]);
      } else {
        w = add_product(w, in.dy[k], (in.x[k] - in.mean[n]) * in.rstd[n]);
        b += in.dy[k];
      }
    }
    dw[c] += w;
    db[c] += b;
  }
}

size_t bit_mismatches(const Buf& a, const Buf& b) {
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); i++) bad += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return bad;
}

const int kShapes[][2] = {{1, 3}, {7, 13}, {64, 256}, {70, 1000}, {9, 2500}};

TEST(NormWeightGrad, LayerNormSumsRowsInOrderBitwise) {
  for (const auto& [N, C] : kShapes) {
    const Inputs in = make_inputs(N, C);
    Buf want_w, want_b, rev_w, rev_b;
    ordered(in, N, C, false, false, want_w, want_b);
    ordered(in, N, C, false, true, rev_w, rev_b);
    if (N >= 64) {
      EXPECT_GT(bit_mismatches(rev_w, want_w) + bit_mismatches(rev_b, want_b), 0u);
    }
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      Buf dw = in.dw0, db = in.db0;
      layernorm_backward_weight(dw.data(), db.data(), in.dy.data(), in.x.data(), in.mean.data(),
                                in.rstd.data(), N, C);
      const std::string at = "N " + std::to_string(N) + " C " + std::to_string(C) + " threads " +
                             std::to_string(threads);
      EXPECT_EQ(bit_mismatches(dw, want_w), 0u) << "dweight, " << at;
      EXPECT_EQ(bit_mismatches(db, want_b), 0u) << "dbias, " << at;
    }
  }
  omp_set_num_threads(1);
}

TEST(NormWeightGrad, RmsNormSumsRowsInOrderBitwise) {
  for (const auto& [N, C] : kShapes) {
    const Inputs in = make_inputs(N, C);
    Buf want_w, unused, rev_w;
    ordered(in, N, C, true, false, want_w, unused);
    ordered(in, N, C, true, true, rev_w, unused);
    if (N >= 64) {
      EXPECT_GT(bit_mismatches(rev_w, want_w), 0u);
    }
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      Buf dw = in.dw0;
      rmsnorm_backward_weight(dw.data(), in.dy.data(), in.x.data(), in.rstd.data(), N, C);
      EXPECT_EQ(bit_mismatches(dw, want_w), 0u)
          << "N " << N << " C " << C << " threads " << threads;
    }
  }
  omp_set_num_threads(1);
}

}  // namespace
}  // namespace mt::test
