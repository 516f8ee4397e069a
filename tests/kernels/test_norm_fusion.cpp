// The residual add fused into LayerNorm and RMSNorm (kernels/layernorm.h, kernels/rmsnorm.h)
// against the unfused composition the blocks ran before, bit for bit: forward add_inplace
// then the norm (fp32 and bf16 output), backward a copy of the residual gradient then the
// accumulating input gradient (separate buffers and dx aliasing dres). fp32 training stays
// bitwise only if these hold.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/bf16.h"
#include "kernels/kernel_harness.h"
#include "kernels/layernorm.h"
#include "kernels/reduce.h"
#include "kernels/rmsnorm.h"

namespace mt::test {
namespace {

constexpr float kEps = 1e-5f;

// Row lengths with and without a vector tail; a large mean in some rows (LayerNorm's
// centring) and a wide spread of magnitudes.
struct Shape {
  int N, C;
};
const Shape kShapes[] = {{7, 67}, {33, 256}, {4, 1}};

struct Rows {
  Buf x, res, w, b, dout, dres;
};

Rows random_rows(const Shape& s, unsigned seed) {
  const size_t n = size_t(s.N) * s.C;
  Rows r{random_normal(n, seed, 3.0f),     random_normal(n, seed + 1),
         random_normal(s.C, seed + 2),     random_normal(s.C, seed + 3),
         random_normal(n, seed + 4, 0.5f), random_normal(n, seed + 5)};
  for (int c = 0; c < s.C; c++) r.x[c] += 1000.0f;  // row 0: a large mean
  return r;
}

TEST(NormFusion, ResidualLayernormForwardIsAddThenLayernorm) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << s.N << "x" << s.C);
    const Rows r = random_rows(s, 11);
    const size_t n = r.x.size();
    Buf x_ref = r.x, out_ref(n), m_ref(s.N), r_ref(s.N);
    add_inplace(x_ref.data(), r.res.data(), n);
    layernorm_forward(out_ref.data(), m_ref.data(), r_ref.data(), x_ref.data(), r.w.data(),
                      r.b.data(), s.N, s.C);
    std::vector<bf16> out16_ref(n);
    to_bf16(out16_ref.data(), out_ref.data(), n);

    Buf x = r.x, out(n), m(s.N), rs(s.N);
    residual_layernorm_forward(out.data(), m.data(), rs.data(), x.data(), r.res.data(), r.w.data(),
                               r.b.data(), s.N, s.C);
    EXPECT_EQ(x, x_ref);
    EXPECT_EQ(out, out_ref);
    EXPECT_EQ(m, m_ref);
    EXPECT_EQ(rs, r_ref);

    Buf x16 = r.x, m16(s.N), rs16(s.N);
    std::vector<bf16> out16(n);
    residual_layernorm_forward_bf16(out16.data(), m16.data(), rs16.data(), x16.data(), r.res.data(),
                                    r.w.data(), r.b.data(), s.N, s.C);
    EXPECT_EQ(x16, x_ref);
    EXPECT_EQ(out16, out16_ref);
    EXPECT_EQ(m16, m_ref);
    EXPECT_EQ(rs16, r_ref);
  }
}

TEST(NormFusion, ResidualRmsnormForwardIsAddThenRmsnorm) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << s.N << "x" << s.C);
    const Rows r = random_rows(s, 21);
    const size_t n = r.x.size();
    Buf x_ref = r.x, out_ref(n), r_ref(s.N);
    add_inplace(x_ref.data(), r.res.data(), n);
    rmsnorm_forward(out_ref.data(), r_ref.data(), x_ref.data(), r.w.data(), s.N, s.C, kEps);
    std::vector<bf16> out16_ref(n);
    to_bf16(out16_ref.data(), out_ref.data(), n);

    Buf x = r.x, out(n), rs(s.N);
    residual_rmsnorm_forward(out.data(), rs.data(), x.data(), r.res.data(), r.w.data(), s.N, s.C,
                             kEps);
    EXPECT_EQ(x, x_ref);
    EXPECT_EQ(out, out_ref);
    EXPECT_EQ(rs, r_ref);

    Buf x16 = r.x, rs16(s.N);
    std::vector<bf16> out16(n);
    residual_rmsnorm_forward_bf16(out16.data(), rs16.data(), x16.data(), r.res.data(), r.w.data(),
                                  s.N, s.C, kEps);
    EXPECT_EQ(x16, x_ref);
    EXPECT_EQ(out16, out16_ref);
    EXPECT_EQ(rs16, r_ref);
  }
}

TEST(NormFusion, ResidualLayernormBackwardIsCopyThenAccumulate) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << s.N << "x" << s.C);
    const Rows r = random_rows(s, 31);
    Buf m(s.N), rs(s.N), out(r.x.size());
    layernorm_forward(out.data(), m.data(), rs.data(), r.x.data(), r.w.data(), r.b.data(), s.N,
                      s.C);
    Buf want = r.dres;  // the copy of the residual gradient, then +=
    layernorm_backward_input(want.data(), r.dout.data(), r.x.data(), r.w.data(), m.data(),
                             rs.data(), s.N, s.C);

    Buf got(r.x.size(), 123.0f);  // overwritten, whatever it held
    residual_layernorm_backward_input(got.data(), r.dres.data(), r.dout.data(), r.x.data(),
                                      r.w.data(), m.data(), rs.data(), s.N, s.C);
    EXPECT_EQ(got, want);
    Buf in_place = r.dres;  // dx aliasing dres
    residual_layernorm_backward_input(in_place.data(), in_place.data(), r.dout.data(), r.x.data(),
                                      r.w.data(), m.data(), rs.data(), s.N, s.C);
    EXPECT_EQ(in_place, want);
  }
}

TEST(NormFusion, ResidualRmsnormBackwardIsCopyThenAccumulate) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << s.N << "x" << s.C);
    const Rows r = random_rows(s, 41);
    Buf rs(s.N), out(r.x.size());
    rmsnorm_forward(out.data(), rs.data(), r.x.data(), r.w.data(), s.N, s.C, kEps);
    Buf want = r.dres;
    rmsnorm_backward_input(want.data(), r.dout.data(), r.x.data(), r.w.data(), rs.data(), s.N, s.C);

    Buf got(r.x.size(), 123.0f);
    residual_rmsnorm_backward_input(got.data(), r.dres.data(), r.dout.data(), r.x.data(),
                                    r.w.data(), rs.data(), s.N, s.C);
    EXPECT_EQ(got, want);
    Buf in_place = r.dres;
    residual_rmsnorm_backward_input(in_place.data(), in_place.data(), r.dout.data(), r.x.data(),
                                    r.w.data(), rs.data(), s.N, s.C);
    EXPECT_EQ(in_place, want);
  }
}

}  // namespace
}  // namespace mt::test
