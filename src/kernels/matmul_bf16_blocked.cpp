#include "kernels/matmul_bf16_blocked.h"

#include <omp.h>

#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
// GCC 12 reports the self-initialised undefined vectors inside its own unpack and shuffle
// intrinsics as uninitialised (GCC bug 105593); silence that header only, as vec_math.h.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "kernels/phase_profile.h"

namespace mt {

namespace {

constexpr int kBlockK = 32, kBlockN = 64;  // one block: 32 K x 64 N bf16, 4 KiB

int64_t round_up(int64_t v, int64_t to) {
  return (v + to - 1) / to * to;
}

// One block with its padding, element by element: the blocks at the right and bottom
// edges, and every block where C is odd (the (k, k + 1) pairs then straddle 32-bit words).
void block_scalar(bf16* dst, const bf16* w, int C, int OC, int k0, int n0) {
  std::memset(static_cast<void*>(dst), 0, kBlockK * kBlockN * sizeof(bf16));
  for (int n = n0; n < n0 + kBlockN && n < OC; ++n)
    for (int k = k0; k < k0 + kBlockK && k < C; ++k)
      dst[(k - k0) / 2 * 2 * kBlockN + (n - n0) * 2 + (k % 2)] = w[size_t(n) * C + k];
}

#if defined(__AVX512F__)
// A full block: the weight's rows read as 32-bit (k, k + 1) pairs, each 64-row quarter a
// 16 x 16 transpose of pairs in registers (one cache line of each row in, one out per K pair).
void block_avx512(bf16* dst, const bf16* w, int C, int k0, int n0) {
  uint32_t* out = reinterpret_cast<uint32_t*>(dst);
  const size_t ld = size_t(C) / 2;  // pairs per weight row
  const uint32_t* in = reinterpret_cast<const uint32_t*>(w) + size_t(n0) * ld + k0 / 2;
  for (int q = 0; q < kBlockN / 16; ++q) {
    __m512i r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(in + (q * 16 + i) * ld);
    for (int i = 0; i < 16; i += 2) {  // pairs of rows interleaved
      t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // r[i + j], lane L: column 4 L + j of rows i..i + 3
      r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
      r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
      r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
      r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int j = 0; j < 4; ++j) {  // gather lane L of r[j], r[4 + j], r[8 + j], r[12 + j]
      const __m512i a = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88),
                    b = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xDD),
                    c = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88),
                    d = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xDD);
      t[j] = _mm512_shuffle_i32x4(a, c, 0x88);       // column j
      t[4 + j] = _mm512_shuffle_i32x4(b, d, 0x88);   // column 4 + j
      t[8 + j] = _mm512_shuffle_i32x4(a, c, 0xDD);   // column 8 + j
      t[12 + j] = _mm512_shuffle_i32x4(b, d, 0xDD);  // column 12 + j
    }
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(out + p * kBlockN + q * 16, t[p]);
  }
}
#endif

}  // namespace

size_t matmul_bf16_blocked_weight_size(int C, int OC) {
  return size_t(round_up(C, kBlockK) * round_up(OC, kBlockN));
}

void matmul_bf16_block_weight(bf16* dst, const bf16* weight, int C, int OC) {
  PhaseScope phase(Phase::conversion, 0, 4.0 * double(C) * OC);
  const int kb = int(round_up(C, kBlockK) / kBlockK), nb = int(round_up(OC, kBlockN) / kBlockN);
#pragma omp parallel for schedule(static) if (int64_t(C) * OC >= (int64_t(1) << 18))
  for (int j = 0; j < nb; ++j)
    for (int i = 0; i < kb; ++i) {
      bf16* block = dst + (size_t(j) * kb + i) * kBlockK * kBlockN;
      const int k0 = i * kBlockK, n0 = j * kBlockN;
#if defined(__AVX512F__)
      if (C % 2 == 0 && k0 + kBlockK <= C && n0 + kBlockN <= OC) {
        block_avx512(block, weight, C, k0, n0);
        continue;
      }
#endif
      block_scalar(block, weight, C, OC, k0, n0);
    }
}

}  // namespace mt
