// The AMX attention core's causal softmax rows (attention_amx.cpp), forward and backward,
// each fused with the bf16 operands it feeds back to the tiles. Included by attention_amx.cpp
// (and its tests) only, in AVX-512 builds.
//
// Why fused: the rows were a chain of passes over memory (scale into att, softmax in place,
// bf16 rows re-read from att; dS in the stage, then re-read twice for its rows and pairs, att
// re-read for P's pairs), and every pass ended in a masked store of the row's tail that the
// next pass loaded again: a masked store does not forward to a later load, so each row paid
// a store-forwarding stall per pass (41% of block_probabilities' samples sat on that one
// load at T 128). Here each value is loaded once per pass it needs and written once.
//
// Bit for bit what the passes computed (tests/kernels/test_attention_amx_softmax.cpp holds
// them to the shared rows softmax_causal_row / softmax_backward_row): the same operations
// in the same order on the same lanes; the fused form only keeps the values in registers.
#pragma once

#if defined(__AVX512F__)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention_amx_pack.h"  // to_bf16x16, pairs16, tail_mask, masked_dot16

namespace mt::attention_amx {

// x * scale as its own rounding: GCC contracts a plain multiply into the subtraction that
// follows it (an FMA, one rounding fewer), which the passes, storing the product between,
// never did. An explicit rounding mode is never contracted.
MT_AMX_ATT inline __m512 scaled(__m512 x, __m512 vs) {
  return _mm512_mul_round_ps(x, vs, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// Softmax forward of causal row i (n = i + 1 visible keys) from its raw scores s (n valid
// values; what lies past them is never read into a result): a (T floats) = softmax(scale s)
// then zeros, as softmax_causal_row leaves it; p (kcols >= n bf16) = a rounded, zeros past n.
MT_AMX_ATT inline void softmax_row_bf16(float* a, bf16* p, const float* s, float scale, int n,
                                        int T, int kcols) {
  const int nfull = n & ~15;
  const __mmask16 mt = tail_mask(n - nfull);
  const __m512 vs = _mm512_set1_ps(scale);
  // Phase 1: the row's maximum of the scaled scores (the tail held in a register).
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int j = 0; j < nfull; j += 16)
    vmax = _mm512_max_ps(vmax, scaled(_mm512_loadu_ps(s + j), vs));
  const __m512 xt = _mm512_maskz_mov_ps(mt, scaled(_mm512_maskz_loadu_ps(mt, s + nfull), vs));
  vmax = _mm512_mask_max_ps(vmax, mt, vmax, xt);
  const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  // Phase 2: the exponentials (whole vectors into a, which phase 3 reloads whole) and sum.
  __m512 vsum = _mm512_setzero_ps();
  for (int j = 0; j < nfull; j += 16) {
    const __m512 e = exp_vec512(_mm512_sub_ps(scaled(_mm512_loadu_ps(s + j), vs), vm));
    _mm512_storeu_ps(a + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  const __m512 et = exp_vec512(_mm512_sub_ps(xt, vm));
  vsum = _mm512_mask_add_ps(vsum, mt, vsum, et);
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  // Phase 3: normalise; a and p written once each, zeros past the row.
  for (int j = 0; j < nfull; j += 16) {
    const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(a + j), inv);
    _mm512_storeu_ps(a + j, x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j), to_bf16x16(x));
  }
  if (nfull < T) {
    const __m512 x = _mm512_maskz_mov_ps(mt, _mm512_mul_ps(et, inv));
    _mm512_mask_storeu_ps(a + nfull, tail_mask(T - nfull), x);
    if (nfull + 16 < T) std::memset(a + nfull + 16, 0, sizeof(float) * size_t(T - nfull - 16));
  }
  for (int c = nfull; c < kcols; c += 16) {
    const __m512 x =
        c == nfull ? _mm512_maskz_mov_ps(mt, _mm512_mul_ps(et, inv)) : _mm512_setzero_ps();
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + c), to_bf16x16(x));
  }
}

// One row of the softmax backward: its probabilities p (n valid), dP = d (n valid) and
// dot = sum p dP.
struct GradRow {
  const float *p = nullptr, *d = nullptr;
  int n = 0;
  __m512 dot = _mm512_setzero_ps();
};

MT_AMX_ATT inline GradRow grad_row(const float* p, const float* d, int n) {
  GradRow g{p, d, n, _mm512_setzero_ps()};
  if (n > 0) g.dot = attention_avx512::masked_dot16(p, d, n);
  return g;
}

// Columns c .. c + 15 of a row: P (zeros past n) and dS = scale P (dP - dot) (zeros past n).
MT_AMX_ATT inline void grad_cols(const GradRow& g, int c, __m512 vs, __m512& p, __m512& ds) {
  if (c >= g.n) {
    p = ds = _mm512_setzero_ps();
    return;
  }
  const __mmask16 m = tail_mask(g.n - c);
  p = _mm512_maskz_loadu_ps(m, g.p + c);
  const __m512 sp = _mm512_mul_ps(vs, p);
  ds = _mm512_maskz_mov_ps(
      m, _mm512_mul_ps(sp, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, g.d + c), g.dot)));
}

// Softmax backward of two consecutive causal rows (n0, n1 visible keys; 0: a row past T),
// with the forward's scale folded in, into the three bf16 forms the tiles read, kcols
// columns each: dS as rows (ds0, ds1), dS and P as pairs along the queries (dsp, pp).
MT_AMX_ATT inline void softmax_grad_pair_bf16(bf16* ds0, bf16* ds1, u32* dsp, u32* pp,
                                              const GradRow& r0, const GradRow& r1, float scale,
                                              int kcols) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int c = 0; c < kcols; c += 16) {
    __m512 p0, d0, p1, d1;
    grad_cols(r0, c, vs, p0, d0);
    grad_cols(r1, c, vs, p1, d1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ds0 + c), to_bf16x16(d0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ds1 + c), to_bf16x16(d1));
    _mm512_storeu_si512(dsp + c, pairs16(d0, d1));
    _mm512_storeu_si512(pp + c, pairs16(p0, p1));
  }
}

}  // namespace mt::attention_amx

#endif  // __AVX512F__
