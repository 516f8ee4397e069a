// Scalar twins of the instructions the AVX512-BF16 attention kernels round with, each spelled
// out so that a reference built from them gives the kernels' bits exactly (not within a
// bf16-sized bound, which a 1e-4 error in a tile hides): the CPU's bf16 conversion, one
// vdpbf16ps lane, exp_vec512 (kernels/vec_math.h) and GCC's _mm512_reduce_add_ps tree.
//
// Every float operation is its own statement or an explicit fmaf, and a product the kernels
// round before adding it passes through kept(), so -O2's contraction of a * b + c into an FMA
// (which -O1 does not do) cannot change a result between the release and the ASan build; the
// a * b + c left (bf16_dot_pair) adds an exact product, for which both agree.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mt::bf16_exact {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// x as computed (rounded to float): the compiler cannot fuse it into a later addition.
inline float kept(float x) {
#if defined(__x86_64__)
  asm("" : "+x"(x));
#else
  volatile float v = x;
  x = v;
#endif
  return x;
}

// A denormal becomes a zero of its sign: what the bf16 instructions do to their inputs and
// results (DAZ, FTZ), whatever MXCSR says.
inline float flush(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}

// vcvtneps2bf16 / vcvtne2ps2bf16 on one value, back as a float: nearest even, denormals to
// zero. (Test inputs hold no NaN.)
inline float round_cvtne(float x) {
  const uint32_t u = float_to_bits(flush(x));
  return bits_to_float(((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16) << 16);
}

// One lane of vdpbf16ps as the Intel SDM writes it: the high pair's product added first, then
// the low pair's, each addition rounded (nearest even, denormals flushed). Products of two
// bf16 values are exact in fp32. AttentionBf16Exact.DotProductInstructionMatchesTheSdm checks
// this CPU against it.
inline float bf16_dot_pair(float acc, float a_lo, float a_hi, float b_lo, float b_hi) {
  const float hi = flush(a_hi) * flush(b_hi);
  const float lo = flush(a_lo) * flush(b_lo);
  acc = flush(flush(acc) + hi);
  return flush(acc + lo);
}

// exp_vec512's lane: the same clamps, reduction and polynomial with its fused multiply-adds,
// and vscalefps's exact 2^n scale.
inline float exp_lane(float x) {
  x = std::fmax(-87.0f, x);
  x = std::fmin(88.0f, x);
  const float t = x * 1.44269504088896341f;
  const float n = std::nearbyint(t);
  float r = std::fmaf(-n, 0.693359375f, x);
  r = std::fmaf(-n, -2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fmaf(p, r, 1.3981999507e-3f);
  p = std::fmaf(p, r, 8.3334519073e-3f);
  p = std::fmaf(p, r, 4.1665795894e-2f);
  p = std::fmaf(p, r, 1.6666665459e-1f);
  p = std::fmaf(p, r, 5.0000001201e-1f);
  const float r2 = r * r;
  const float r1 = r + 1.0f;
  p = std::fmaf(p, r2, r1);
  return std::ldexp(p, int(n));
}

// _mm512_reduce_add_ps's order in GCC: the two 256-bit halves, then the two 128-bit halves,
// then lanes {0,1} + {2,3}, then lane 0 + lane 1.
inline float reduce_add16(const float lanes[16]) {
  float t8[8], t4[4];
  for (int i = 0; i < 8; i++) t8[i] = lanes[i + 8] + lanes[i];
  for (int i = 0; i < 4; i++) t4[i] = t8[i + 4] + t8[i];
  const float a = t4[2] + t4[0];
  const float b = t4[3] + t4[1];
  return b + a;
}

}  // namespace mt::bf16_exact
