// The per-row softmax work of flash attention on one row of a (query block, key block) tile
// of kFlashKeyBlock = 32 scores: the forward's online-softmax step and the backward's P and
// dS. Masked keys (kp[j] > qp) get exactly 0. AVX-512 builds hold the 32 scores in two
// registers (the loops' horizontal reductions were a third of the forward's time); other
// builds run the same arithmetic as loops.
#pragma once

#include <cmath>
#include <cstring>

#include "kernels/flash_attention.h"
#include "kernels/vec_math.h"

namespace mt::flash {

static_assert(kFlashKeyBlock == 32, "the row steps hold a key block in two 16-lane vectors");

#if defined(__AVX512F__)

// Lanes of keys visible to a query at position qp (kp null: all).
struct RowMask {
  __mmask16 lo = 0xFFFF, hi = 0xFFFF;
  RowMask(const int* kp, int qp) {
    if (!kp) return;
    const __m512i q = _mm512_set1_epi32(qp);
    lo = _mm512_cmple_epi32_mask(_mm512_loadu_si512(kp), q);
    hi = _mm512_cmple_epi32_mask(_mm512_loadu_si512(kp + 16), q);
  }
};

// One row of scores s: masked to its visible keys (kp null: all visible), replaced by
// exp(s - m_new) in place; the running max m and sum l updated and c set to the factor
// exp(m_old - m_new) that rescales the row's accumulator (1 when it need not change).
inline void softmax_step_row(float* s, const int* kp, int qp, float& m, float& l, float& c) {
  const RowMask v(kp, qp);
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  const __m512 s0 = _mm512_mask_loadu_ps(ninf, v.lo, s),
               s1 = _mm512_mask_loadu_ps(ninf, v.hi, s + 16);
  const float mx = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
  if (mx == -INFINITY) {  // nothing visible in this block: P row 0, accumulator unchanged
    _mm512_storeu_ps(s, _mm512_setzero_ps());
    _mm512_storeu_ps(s + 16, _mm512_setzero_ps());
    c = 1.0f;
    return;
  }
  const float mnew = m > mx ? m : mx;
  c = m == -INFINITY || m == mnew ? 1.0f : exp_vec(m - mnew);  // l, acc are 0 before a key
  const __m512 vm = _mm512_set1_ps(mnew);
  const __m512 p0 = _mm512_maskz_mov_ps(v.lo, exp_vec512(_mm512_sub_ps(s0, vm)));
  const __m512 p1 = _mm512_maskz_mov_ps(v.hi, exp_vec512(_mm512_sub_ps(s1, vm)));
  _mm512_storeu_ps(s, p0);
  _mm512_storeu_ps(s + 16, p1);
  // mul_add: the rounding the release build's contraction gave, spelled out, so the -O1
  // (sanitizer) build computes the same l and tests can pin it bit for bit.
  l = mul_add(l, c, _mm512_reduce_add_ps(_mm512_add_ps(p0, p1)));
  m = mnew;
}

// A row of P = exp(s - lse) into s (0 where masked, or everywhere when the row saw no key at
// all: lse -inf) and of dS = scale P (dP - D) into dp.
inline void probs_row(float* s, float* dp, const int* kp, int qp, float lse, float D, float scale) {
  const RowMask v(kp, lse == -INFINITY ? -1 : qp);
  const __m512 vl = _mm512_set1_ps(lse), vd = _mm512_set1_ps(D), vs = _mm512_set1_ps(scale);
  for (int h = 0; h < 2; h++) {
    const __mmask16 mask = h ? v.hi : v.lo;
    const __m512 p =
        _mm512_maskz_mov_ps(mask, exp_vec512(_mm512_sub_ps(_mm512_loadu_ps(s + 16 * h), vl)));
    const __m512 ds =
        _mm512_mul_ps(_mm512_mul_ps(vs, p), _mm512_sub_ps(_mm512_loadu_ps(dp + 16 * h), vd));
    _mm512_storeu_ps(s + 16 * h, p);
    _mm512_storeu_ps(dp + 16 * h, ds);
  }
}

#else  // the same steps as loops

inline void softmax_step_row(float* s, const int* kp, int qp, float& m, float& l, float& c) {
  float mx = -INFINITY;
  for (int j = 0; j < kFlashKeyBlock; j++)
    if (!kp || kp[j] <= qp) mx = s[j] > mx ? s[j] : mx;
  if (mx == -INFINITY) {
    std::memset(s, 0, sizeof(float) * kFlashKeyBlock);
    c = 1.0f;
    return;
  }
  const float mnew = m > mx ? m : mx;
  c = m == -INFINITY || m == mnew ? 1.0f : exp_vec(m - mnew);
  float sum = 0.0f;
  for (int j = 0; j < kFlashKeyBlock; j++) {
    s[j] = !kp || kp[j] <= qp ? exp_vec(s[j] - mnew) : 0.0f;
    sum += s[j];
  }
  l = l * c + sum;
  m = mnew;
}

inline void probs_row(float* s, float* dp, const int* kp, int qp, float lse, float D, float scale) {
  for (int j = 0; j < kFlashKeyBlock; j++) {
    const float p = lse != -INFINITY && kp[j] <= qp ? exp_vec(s[j] - lse) : 0.0f;
    s[j] = p;
    dp[j] = scale * p * (dp[j] - D);
  }
}

#endif

}  // namespace mt::flash
