#include "kernels/adamw.h"
#include "kernels/phase_profile.h"

#include <omp.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/bf16.h"
#include "kernels/vec_math.h"

namespace mt {

namespace {

struct AdamWScalars {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bc2_sqrt, eps,
      grad_scale;
};

// One element, in torch's order. torch's add_(g, alpha) and addcmul_ end in a fused
// multiply-add (checked against torch 1.13 on AVX2, vector body and scalar tail alike);
// every other step rounds separately.
inline void adamw_one(float& param, float g, float& m, float& v, const AdamWScalars& s) {
  g = g * s.grad_scale;
  float mi = __builtin_fmaf(g, s.one_minus_beta1, m * s.beta1);
  float vi = __builtin_fmaf(s.one_minus_beta2 * g, g, v * s.beta2);
  float denom = __builtin_sqrtf(vi) / s.bc2_sqrt + s.eps;
  param = param * s.decay + (s.neg_step_size * mi) / denom;
  m = mi;
  v = vi;
}

// Inf and NaN are the floats whose exponent bits are all ones: a bit test (as all_finite
// does) rather than std::isfinite, which -ffinite-math style assumptions may fold away.
constexpr uint32_t kExponent = 0x7f800000u;
inline uint32_t nonfinite_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return (bits & kExponent) == kExponent;
}

// Bitwise agreement with torch needs exact control of rounding: GCC would otherwise fuse
// p * decay + update into one FMA (torch rounds p * decay first); the attribute does not
// reach OpenMP's outlined bodies, hence this per-thread chunk function. The AVX-512 body
// spells the same operations out because sqrt's errno handling (no -fno-math-errno here)
// keeps GCC from vectorising the plain loop, which then costs more than the memory traffic.
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized on _mm512_sqrt_ps under this attribute.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Returns true when any element it wrote is non-finite. copy (may be null): where the
// updated weights' bf16 values go, rounded from the registers the fp32 stores come from.
[[gnu::optimize("fp-contract=off"), gnu::noinline]] bool adamw_chunk(float* param,
                                                                     const float* grad, float* m,
                                                                     float* v, bf16* copy,
                                                                     size_t lo, size_t hi,
                                                                     const AdamWScalars& s) {
  size_t i = lo;
  uint32_t bad = 0;
#if defined(__AVX512F__)
  const __m512 decay = _mm512_set1_ps(s.decay), beta1 = _mm512_set1_ps(s.beta1),
               omb1 = _mm512_set1_ps(s.one_minus_beta1), beta2 = _mm512_set1_ps(s.beta2),
               omb2 = _mm512_set1_ps(s.one_minus_beta2), nss = _mm512_set1_ps(s.neg_step_size),
               bc2 = _mm512_set1_ps(s.bc2_sqrt), eps = _mm512_set1_ps(s.eps),
               scale = _mm512_set1_ps(s.grad_scale);
  // Lanes whose exponent is all ones in p, m or v, OR-ed over the chunk: three integer
  // compares on values already in registers, no extra memory traffic (the loop is bound by
  // its seven streams of loads and stores). Integer ops cannot change the update's bits.
  const __m512i exponent = _mm512_set1_epi32(static_cast<int>(kExponent));
  auto nonfinite = [&](__m512 x) {
    return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), exponent), exponent);
  };
  __mmask16 bad_lanes = 0;
  for (; i + 16 <= hi; i += 16) {
    __m512 g = _mm512_mul_ps(_mm512_loadu_ps(grad + i), scale);
    __m512 mi = _mm512_fmadd_ps(g, omb1, _mm512_mul_ps(_mm512_loadu_ps(m + i), beta1));
    __m512 vi =
        _mm512_fmadd_ps(_mm512_mul_ps(omb2, g), g, _mm512_mul_ps(_mm512_loadu_ps(v + i), beta2));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
    __m512 p = _mm512_mul_ps(_mm512_loadu_ps(param + i), decay);
    p = _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(nss, mi), denom));
    _mm512_storeu_ps(param + i, p);
    if (copy) _mm256_storeu_si256(reinterpret_cast<__m256i*>(copy + i), round_bf16x16(p));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    bad_lanes = static_cast<__mmask16>(bad_lanes | nonfinite(p) | nonfinite(mi) | nonfinite(vi));
  }
  bad = bad_lanes != 0;
#endif
  for (; i < hi; i++) {
    adamw_one(param[i], grad[i], m[i], v[i], s);
    if (copy) copy[i] = float_to_bf16(param[i]);
    bad |= nonfinite_bits(param[i]) | nonfinite_bits(m[i]) | nonfinite_bits(v[i]);
  }
  return bad != 0;
}
#pragma GCC diagnostic pop

}  // namespace

namespace {

// Scalars exactly as torch derives them from Python floats (see adamw.h).
AdamWScalars scalars_of(const AdamWParams& hp, double weight_decay) {
  const double bias_correction1 = 1.0 - std::pow(hp.beta1, static_cast<double>(hp.step));
  const double bias_correction2 = 1.0 - std::pow(hp.beta2, static_cast<double>(hp.step));
  return {static_cast<float>(1.0 - hp.lr * weight_decay),
          static_cast<float>(hp.beta1),
          static_cast<float>(1.0 - hp.beta1),
          static_cast<float>(hp.beta2),
          static_cast<float>(1.0 - hp.beta2),
          static_cast<float>(-(hp.lr / bias_correction1)),
          static_cast<float>(std::sqrt(bias_correction2)),
          static_cast<float>(hp.eps),
          hp.grad_scale};
}

}  // namespace

bool adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWParams& hp) {
  const AdamWPiece piece{param, grad, m, v, nullptr, n, true};
  return adamw_update_pieces(std::span<const AdamWPiece>(&piece, 1), hp);
}

bool adamw_update_pieces(std::span<const AdamWPiece> pieces, const AdamWParams& hp) {
  size_t total = 0, copied = 0;
  for (const AdamWPiece& p : pieces) total += p.n, copied += p.copy ? p.n : 0;
  PhaseScope phase_scope(Phase::optimizer, 0, 28.0 * double(total) + 2.0 * double(copied));
  const AdamWScalars with_decay = scalars_of(hp, hp.weight_decay), no_decay = scalars_of(hp, 0.0);
  int bad = 0;
  // One team for every piece: each thread takes a contiguous, 16-float aligned share of the
  // pieces laid end to end (the moments' order) and updates the parts of the pieces in it.
  // Each element's update depends on that element only, so the split cannot change a bit.
#pragma omp parallel reduction(| : bad)
  {
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    const size_t per = ((total + nt - 1) / nt + 15) / 16 * 16;
    const size_t lo = per * static_cast<size_t>(omp_get_thread_num());
    const size_t hi = lo + per < total ? lo + per : total;
    size_t start = 0;  // the current piece's first element, end to end
    for (const AdamWPiece& p : pieces) {
      if (hi <= start) break;
      const size_t a = lo > start ? lo - start : 0, b = hi - start < p.n ? hi - start : p.n;
      if (a < b)
        bad |=
            adamw_chunk(p.param, p.grad, p.m, p.v, p.copy, a, b, p.decay ? with_decay : no_decay);
      start += p.n;
    }
  }
  return bad == 0;
}

}  // namespace mt
