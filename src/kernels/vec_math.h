// Branch-free float math that GCC vectorises inside plain loops (libm's expf/tanhf are
// scalar calls without -ffast-math, which would make GELU and softmax dominate a step).
#pragma once

#include <bit>
#include <cstdint>

#if defined(__AVX512F__)
// GCC 12 reports the self-initialised _mm512_undefined_ps() inside its own intrinsics
// (shuffles, max, scalef, ...) as uninitialised (GCC bug 105593); silence that header only.
// Kernels include immintrin.h through here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace mt {

// acc + a * b with one rounding where the build has FMA, two elsewhere, written out: GCC
// contracts `acc += a * b` only from -O2 on, so a sum left to the compiler has other bits
// in an -O1 sanitizer build than in the release one (the norms' weight gradients, whose
// tests pin their order bit for bit, say which rounding they use through this).
inline float mul_add(float a, float b, float acc) {
#if defined(__FMA__)
  return __builtin_fmaf(a, b, acc);
#else
  return acc + a * b;
#endif
}

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

#if defined(__AVX512F__)
// exp_vec on 16 lanes for the hand-vectorised kernels: the same reduction and polynomial,
// with fused multiply-adds (so it may differ from exp_vec in the last bit) and the 2^n
// scale by vscalefps, which is exact for the integral n used here.
inline __m512 exp_vec512(__m512 x) {
  // vmaxps/vminps return the second operand when either is NaN: x second keeps NaN a NaN.
  x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// 16 floats -> 16 bf16 with float_to_bf16's rule on the integer bits (nearest even, NaN ->
// 0x7FC0, denormals kept).
inline __m256i round_bf16x16_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(r);
}

// 16 floats -> 16 bf16 with float_to_bf16's rule, so a kernel that rounds its own output
// equals to_bf16 of the fp32 result bit for bit. Where the build targets AVX512-BF16
// (-march=native on such a CPU) the conversion instruction rounds the normal values, about
// half the cost of the integer rounding (whose 32->16-bit narrowing is slow on Zen); it
// flushes denormals and keeps a NaN's sign and payload, so a vector holding either takes
// the integer path instead.
inline __m256i round_bf16x16(__m512 v) {
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  // One classification: quiet NaN (0x01), denormal (0x20), signalling NaN (0x80).
  const __mmask16 special = _mm512_fpclass_ps_mask(v, 0x01 | 0x20 | 0x80);
  if (__builtin_expect(special == 0, 1)) return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
#endif
  return round_bf16x16_bits(v);
}
#endif

}  // namespace mt
