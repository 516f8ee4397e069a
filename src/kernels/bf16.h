// bfloat16 storage: the top 16 bits of an IEEE fp32 (sign, 8-bit exponent, 7 stored
// significand bits), so conversion to fp32 is exact and from fp32 is one rounding.
// meshtrain keeps bf16 only as a storage and GEMM-input format (--precision bf16,
// docs/precision.md); arithmetic is fp32.
//
// Rounding is to nearest, ties to even, exactly as PyTorch's c10::BFloat16
// (round_to_nearest_even): the same fp32 input gives the same bits, so the PyTorch autocast
// comparison sees the same rounded weights. NaN becomes the quiet NaN 0x7FC0 (as torch,
// sign dropped); infinities stay infinities; a finite value past the largest bf16 rounds
// to infinity. Denormals are kept (rounded like any other value), unlike the hardware
// VCVTNEPS2BF16, which flushes them to zero: that is why this is not the intrinsic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mt {

using bf16 = std::uint16_t;  // raw bits; never do arithmetic on it

inline bf16 float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
  // Adding 0x7FFF plus the lowest kept bit rounds the dropped 16 bits to nearest, ties to
  // the even kept value; a carry into the exponent is the correct rounding up.
  return bf16((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// float_to_bf16's rule written branch-free (a select instead of the NaN return), so loops
// that round their own outputs vectorise; the same bits for every input.
inline bf16 float_to_bf16_select(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const std::uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? bf16(0x7FC0) : bf16(r);
}

inline float bf16_to_float(bf16 h) {
  std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// out (n) = bf16(in (n)). Vectorised; threaded with OpenMP when n is large.
void to_bf16(bf16* out, const float* in, size_t n);
// x (n floats) rounded to bf16 in place: returns the n bf16 values, now at x's start, bitwise
// to_bf16's. For a buffer whose fp32 values are not read again (dlogits, which the head's two
// GEMMs read in bf16): one pass and no second buffer. On the calling thread only: a value's
// bytes are overwritten only after the loop has read them, in order.
bf16* to_bf16_in_place(float* x, size_t n);
// out (n) = float(in (n)), exact.
void from_bf16(float* out, const bf16* in, size_t n);
// x (n) = float(bf16(x)) in place: what a bf16 round trip leaves (tests, reference twins).
void round_to_bf16(float* x, size_t n);

}  // namespace mt
