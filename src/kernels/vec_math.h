// Branch-free float math that GCC vectorises inside plain loops (libm's expf/tanhf are
// scalar calls without -ffast-math, which would make GELU and softmax dominate a step).
#pragma once

#include <bit>
#include <cstdint>

namespace mt {

// exp(x) to about 1 ulp (Cephes' expf polynomial after Cody-Waite range reduction).
// Inputs are clamped to [-87, 88] so the 2^n scale stays a normal float: exp(-87) = 1.6e-38
// stands in for smaller results, which is harmless for the softmax and sigmoid callers.
inline float exp_vec(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without a libm call.
  const float round_magic = 12582912.0f;
  float n = (x * 1.44269504088896341f + round_magic) - round_magic;
  float r = x - n * 0.693359375f;  // ln2 split in two so n * ln2_hi is exact
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(e);
}

}  // namespace mt
