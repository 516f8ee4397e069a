// Philox 4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2,
// 3", SC'11; the generator behind cuRAND's and PyTorch's dropout): a keyed bijection of a
// 128-bit counter, so a random word is a pure function of (key, counter) and any rank can
// compute any element's draw without state or a tracker. Ten rounds of two 32x32->64
// multiplications (the "product, high, low, xor" Feistel step) with a Weyl-sequence key
// schedule. Checked against the Random123 known-answer vectors (tests/kernels/test_dropout.cpp).
#pragma once

#include <array>
#include <cstdint>

namespace mt {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kWeyl0 = 0x9E3779B9u,
                     kWeyl1 = 0xBB67AE85u;  // key bumps: golden ratio, sqrt(3)-1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k = {k[0] + kWeyl0, k[1] + kWeyl1};
    const uint64_t p0 = uint64_t(kMul0) * c[0], p1 = uint64_t(kMul1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1],
         uint32_t(p0)};
  }
  return c;
}

}  // namespace mt
