// --precision bf16's register-blocked causal attention for one (batch, head) (declared in
// attention_bf16_avx512.h). The tiling of the fp32 kernels (attention_avx512.cpp) with
// _mm512_dpbf16_ps, which multiplies pairs of bf16 values and adds both products to an fp32 lane:
// 32 multiply-adds per instruction against the FMA's 16. The reduction index k of each product is
// taken two at a time, so the operands are packed into 32-bit "pairs" (element k in the low
// half, k + 1 in the high half) once per head:
//  - the broadcast side (a row of q, dout, P or dS) as rows of pairs; for the key-side
//    products (dS^T q, P^T dout) the pairs of two consecutive rows of dS and P, read down a
//    column (pack_row_pairs), so neither is transposed;
//  - the vector side of a scores product (k for q k^T, v for dout v^T) as key blocks of
//    (hd / 2, 32) pairs, the transpose of transpose_block with pairs for elements;
//  - the vector side of a rows product (v, k, q, dout) with two consecutive rows interleaved.
// Keys are padded to Tp = T rounded up to 32 with zeros (a zero pair adds nothing: odd T and
// partial blocks need no special case). Products crossing the diagonal read exact zeros there
// (P and dS are zero above it), which lets a pair start one row early.
#include "kernels/attention_bf16_avx512.h"

#if defined(__AVX512F__)
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/attention_avx512_tiles.h"
#include "kernels/attention_bf16_pack.h"
#include "kernels/attention_bf16_rows.h"
#endif

namespace mt {

#if defined(__AVX512F__)
namespace {

using namespace attention_avx512;

#define MT_BF16_TARGET __attribute__((target("avx512bf16")))

// Per-thread packing buffers, grown to the largest head seen (OpenMP workers and rank
// threads each get their own; nothing is allocated once the sizes are known).
struct Bf16Scratch {
  std::vector<u32> x, yt, b1, b2, rows, t1, t2;
  std::vector<float> ds;  // the backward's (T, T) dP / dS of one head
  // One head's (T, T) scores and probabilities where the caller keeps row statistics instead:
  // the forward's softmax input, the backward's recomputed P.
  std::vector<float> p;
  template <class V>
  static typename V::value_type* sized(V& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};
Bf16Scratch& bf16_scratch() {
  thread_local Bf16Scratch s;
  return s;
}

// kHalf: only the block's first 16 keys (the diagonal block of a stripe that ends within
// them), 8 accumulators instead of 16; each computed score is the same chain of products.
template <int HD, int R, bool kHalf>
MT_BF16_TARGET void scores_tile_bf16(float* s, int lds, const u32* x, const u32* yt, float alpha,
                                     __mmask16 m0, __mmask16 m1) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
  for (int p = 0; p < HD / 2; p++) {
    const __m512bh y0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(yt + p * kKeyBlock));
    const __m512bh y1 =
        kHalf ? y0 : reinterpret_cast<__m512bh>(_mm512_loadu_si512(yt + p * kKeyBlock + 16));
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const __m512bh xb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(x[r * (HD / 2) + p]));
      acc0[r] = _mm512_dpbf16_ps(acc0[r], xb, y0);
      if constexpr (!kHalf) acc1[r] = _mm512_dpbf16_ps(acc1[r], xb, y1);
    }
  }
  if constexpr (kHalf) {
    const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      if (m0 == 0xFFFF)
        _mm512_storeu_ps(s + size_t(r) * lds, _mm512_mul_ps(acc0[r], va));
      else
        _mm512_mask_storeu_ps(s + size_t(r) * lds, m0, _mm512_mul_ps(acc0[r], va));
    }
  } else {
    store_scores<R>(s, lds, acc0, acc1, alpha, m0, m1);
  }
}

template <int HD, int R>
MT_BF16_TARGET void scores_tail_bf16(int rows, bool half, float* s, int lds, const u32* x,
                                     const u32* yt, float alpha, __mmask16 m0, __mmask16 m1) {
  if constexpr (R > 0) {
    if (rows == R) {
      if (half)
        scores_tile_bf16<HD, R, true>(s, lds, x, yt, alpha, m0, m1);
      else
        scores_tile_bf16<HD, R, false>(s, lds, x, yt, alpha, m0, m1);
    } else {
      scores_tail_bf16<HD, R - 1>(rows, half, s, lds, x, yt, alpha, m0, m1);
    }
  }
}

// How the broadcast side of a rows product lays out pair kp of row r: row-major (a[r * lda +
// kp]: the rows of P, dS, q, dout) or pair-major (a[kp * lda + r]: pack_row_pairs' columns,
// the key-side products' transposed operands read in place).
enum class PairLayout { row_major, pair_major };

// c[r][0:HD] (+)= sum over pairs kp in [kp0, kp1) of a(r, kp) . b[kp][0:HD].
template <int HD, int R, PairLayout L, typename OutT>
MT_BF16_TARGET void rows_tile_bf16(OutT* c, int ldc, bool accumulate, const u32* a, int lda,
                                   const u32* b, int kp0, int kp1) {
  constexpr int NV = HD / 16;
  __m512 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
  for (int kp = kp0; kp < kp1; kp++) {
    __m512bh bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++)
      bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + size_t(kp) * HD + 16 * v));
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const u32 pair =
          L == PairLayout::row_major ? a[size_t(r) * lda + kp] : a[size_t(kp) * lda + r];
      const __m512bh ab = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
#pragma GCC unroll 8
      for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ab, bv[v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) {
      OutT* cp = c + size_t(r) * ldc + 16 * v;
      if constexpr (std::is_same_v<OutT, float>)
        _mm512_storeu_ps(cp,
                         accumulate ? _mm512_add_ps(_mm512_loadu_ps(cp), acc[r][v]) : acc[r][v]);
      else  // bf16 out (overwrite only): to_bf16's rounding
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(cp), round_bf16x16(acc[r][v]));
    }
  }
}

template <int HD, int R, PairLayout L = PairLayout::row_major, typename OutT>
MT_BF16_TARGET void rows_any_bf16(int rows, OutT* c, int ldc, bool accumulate, const u32* a,
                                  int lda, const u32* b, int kp0, int kp1) {
  if constexpr (R > 0) {
    if (rows == R)
      rows_tile_bf16<HD, R, L>(c, ldc, accumulate, a, lda, b, kp0, kp1);
    else
      rows_any_bf16<HD, R - 1, L>(rows, c, ldc, accumulate, a, lda, b, kp0, kp1);
  }
}

// s rows [i0, i0 + rows) at keys [0, kend) (and the rest of kend's key block, or of its half
// when kend falls in the block's first 16 keys) = alpha x y^T: a stripe of the causal scores.
// Each score is one chain of dot products over the head dim, so the tile a score is computed in
// does not change its bits; keys past kend are never read (above the diagonal).
template <int HD, int R>
MT_BF16_TARGET void stripe_scores_bf16(float* s, const u32* x, const u32* yt, int T, int i0,
                                       int rows, float alpha) {
  const int kend = i0 + rows;
  for (int j0 = 0; j0 < kend; j0 += kKeyBlock) {
    const int n = std::min(kKeyBlock, T - j0);
    scores_tail_bf16<HD, R>(
        rows, kend - j0 <= 16, s + size_t(i0) * T + j0, T, x + size_t(i0) * (HD / 2),
        yt + size_t(j0 / kKeyBlock) * (HD / 2) * kKeyBlock, alpha, tail_mask(n), tail_mask(n - 16));
  }
}

// One stripe of R query rows at a time: its scores, softmax (P into att and, in the same
// pass, its bf16 rows) and P v, so the stripe's scores are re-read from L1, not from a
// (T, T) block written whole first. stats not null: the scores go to a per-thread (T, T)
// buffer that stays in L2, only P's bf16 rows are formed (no fp32 P), and each row's maximum
// and 1 / sum go to stats (T, 2), all the backward needs to recompute P (the (B, H, T, T)
// store and its reload are the cost saved).
template <int HD, typename OutT>
MT_BF16_TARGET void forward_head_bf16(const AttentionHead& h, OutT* out, int ldo, float* att,
                                      float* stats, u32* packed) {
  const int T = h.T, Tp = round_up(T, kKeyBlock), lda = Tp / 2;
  constexpr int R = rows_per_tile<HD>();
  Bf16Scratch& sc = bf16_scratch();
  if (stats) att = Bf16Scratch::sized(sc.p, size_t(T) * T);
  // packed: q and k packed where the backward reads them again (the saved buffer).
  u32* qx = packed ? packed : Bf16Scratch::sized(sc.x, size_t(T) * HD / 2);
  u32* kt = packed ? packed + size_t(T) * HD / 2 : Bf16Scratch::sized(sc.yt, size_t(Tp) * HD / 2);
  u32* vp = Bf16Scratch::sized(sc.b1, size_t(Tp / 2) * HD);
  u32* pr = Bf16Scratch::sized(sc.rows, size_t(R) * lda);
  pack_rows<HD>(qx, h.q, h.ld, T);
  pack_key_blocks<HD>(kt, h.k, h.ld, T);
  pack_interleaved<HD>(vp, h.v, h.ld, T, Tp);
  for (int i0 = 0; i0 < T; i0 += R) {
    const int rows = std::min(R, T - i0), kend = i0 + rows;  // keys 0 .. kend-1
    stripe_scores_bf16<HD, R>(att, qx, kt, T, i0, rows, h.scale);
    softmax_causal_stripe_bf16<R>(att, T, reinterpret_cast<uint16_t*>(pr), 2 * lda, i0, rows,
                                  round_up(kend, 32), stats);
    rows_any_bf16<HD, R>(rows, out + size_t(i0) * ldo, ldo, false, pr, lda, vp, 0, (kend + 1) / 2);
  }
}

// P again from the forward's row statistics: the scores by the forward's packers (or the
// packing the forward saved, packed not null) and products, then softmax_recompute_row, a
// stripe at a time into a per-thread (T, T) buffer: bit for bit the forward's P (past the
// diagonal neither written nor read).
template <int HD>
MT_BF16_TARGET const float* recompute_probs_bf16(const AttentionHead& h, const float* stats,
                                                 const u32* packed, Bf16Scratch& sc) {
  const int T = h.T, Tp = round_up(T, kKeyBlock);
  constexpr int R = rows_per_tile<HD>();
  float* p = Bf16Scratch::sized(sc.p, size_t(T) * T);
  const u32 *qx = packed, *kt = packed + size_t(T) * HD / 2;
  if (!packed) {
    u32* x = Bf16Scratch::sized(sc.x, size_t(T) * HD / 2);
    u32* yt = Bf16Scratch::sized(sc.yt, size_t(Tp) * HD / 2);
    pack_rows<HD>(x, h.q, h.ld, T);
    pack_key_blocks<HD>(yt, h.k, h.ld, T);
    qx = x, kt = yt;
  }
  for (int i0 = 0; i0 < T; i0 += R) {
    const int rows = std::min(R, T - i0);
    stripe_scores_bf16<HD, R>(p, qx, kt, T, i0, rows, h.scale);
    for (int i = i0; i < i0 + rows; i++)
      softmax_recompute_row<false>(p + size_t(i) * T, i, T, stats + 2 * i);
  }
  return p;
}

template <int HD, typename OutT>
MT_BF16_TARGET void backward_head_bf16(const AttentionHead& h, OutT* dq, OutT* dk, OutT* dv,
                                       int ldd, const float* dout, int lddo, const float* att,
                                       const float* stats, const u32* packed, bool accumulate) {
  const int T = h.T, Tp = round_up(T, kKeyBlock), lda = Tp / 2;
  constexpr int R = rows_per_tile<HD>();
  Bf16Scratch& sc = bf16_scratch();
  if (stats) att = recompute_probs_bf16<HD>(h, stats, packed, sc);  // before x, yt are reused
  // dP / dS live in a per-thread (T, T) buffer, not in the caller's (B, H, T, T) scratch:
  // it is written and re-read within this head, so it stays in L2 (64 KB at T 128) instead
  // of streaming 2 MB per layer (B 4, H 8) through memory; the arithmetic is unchanged.
  float* da = Bf16Scratch::sized(sc.ds, size_t(T) * T);
  u32* dox = Bf16Scratch::sized(sc.x, size_t(T) * HD / 2);
  u32* vt = Bf16Scratch::sized(sc.yt, size_t(Tp) * HD / 2);
  u32* kp = Bf16Scratch::sized(sc.b1, size_t(Tp / 2) * HD);
  u32* qp = Bf16Scratch::sized(sc.b2, size_t(Tp / 2) * HD);
  u32* dsr = Bf16Scratch::sized(sc.rows, size_t(R) * lda);
  pack_rows<HD>(dox, dout, lddo, T);
  pack_key_blocks<HD>(vt, h.v, h.ld, T);
  pack_interleaved<HD>(kp, h.k, h.ld, T, Tp);
  // A stripe of R query rows at a time: dP = dout v^T, then dS (fp32 in place, and its bf16
  // rows in the same pass) and dq += dS k.
  for (int i0 = 0; i0 < T; i0 += R) {
    const int rows = std::min(R, T - i0), kend = i0 + rows;
    stripe_scores_bf16<HD, R>(da, dox, vt, T, i0, rows, 1.0f);
    softmax_backward_stripe_bf16<R>(da, att, T, reinterpret_cast<uint16_t*>(dsr), 2 * lda, i0, rows,
                                    h.scale, round_up(kend, 32));
    rows_any_bf16<HD, R>(rows, dq + size_t(i0) * ldd, ldd, accumulate, dsr, lda, kp, 0,
                         (kend + 1) / 2);  // each dq row is written once
  }
  // dk += dS^T q and dv += P^T dout, the reduction over query rows in pairs: dS and P as
  // pairs of consecutive rows, read down their columns (pair-major), not transposed.
  u32* dsp = Bf16Scratch::sized(sc.t1, size_t(Tp) * lda);
  u32* pp = Bf16Scratch::sized(sc.t2, size_t(Tp) * lda);
  pack_row_pairs(dsp, da, T, Tp);
  pack_row_pairs(pp, att, T, Tp);
  u32* dop = kp;  // k's pairs are done with
  // From the packed rows where there are some (dout's, and q's saved by the forward): the
  // same words, without reading the fp32 rows again.
  if (packed)
    interleave_packed_rows<HD>(qp, packed, T, Tp);
  else
    pack_interleaved<HD>(qp, h.q, h.ld, T, Tp);
  interleave_packed_rows<HD>(dop, dox, T, Tp);
  for (int r0 = 0; r0 < T; r0 += kAttentionBf16DirectMaxT) {
    const int r1 = std::min(T, r0 + kAttentionBf16DirectMaxT), kp1 = (r1 + 1) / 2;
    for (int j0 = 0; j0 < r1; j0 += R) {
      // Query rows before j0 contribute zeros; starting the pairs at an even row may take
      // one such row.
      // A key tile is first written by the query block it starts in (j0 >= r0); rows of it
      // past r1 get exact zeros there (their query rows are all above the diagonal).
      const int rows = std::min(R, T - j0), kp0 = std::max(j0, r0) / 2;
      const bool acc = accumulate || j0 < r0;
      rows_any_bf16<HD, R, PairLayout::pair_major>(rows, dk + size_t(j0) * ldd, ldd, acc, dsp + j0,
                                                   Tp, qp, kp0, kp1);
      rows_any_bf16<HD, R, PairLayout::pair_major>(rows, dv + size_t(j0) * ldd, ldd, acc, pp + j0,
                                                   Tp, dop, kp0, kp1);
    }
  }
}

// rows_per_tile for a runtime head dim.
int bf16_rows(int hd) {
  int R = 0;
  with_head_dim(hd, "attention_bf16_avx512_scratch_bytes",
                [&](auto h) { R = rows_per_tile<decltype(h)::value>(); });
  return R;
}

bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

// The entry points of both output types: with_head_dim picks the instantiation.
template <typename OutT>
void head_forward_bf16(const AttentionHead& h, OutT* out, int ldo, float* att, float* stats,
                       u32* packed) {
  MT_CHECK(!packed || stats, "attention_head_forward_bf16: packed operands without row stats");
  with_head_dim(h.hd, "attention_head_forward_bf16", [&](auto hd) {
    forward_head_bf16<decltype(hd)::value>(h, out, ldo, att, stats, packed);
  });
}

template <typename OutT>
void head_backward_bf16(const AttentionHead& h, OutT* dq, OutT* dk, OutT* dv, int ldd,
                        const float* dout, int lddo, const float* att, const float* stats,
                        const u32* packed, bool accumulate) {
  MT_CHECK(!packed || stats, "attention_head_backward_bf16: packed operands without row stats");
  with_head_dim(h.hd, "attention_head_backward_bf16", [&](auto hd) {
    backward_head_bf16<decltype(hd)::value>(h, dq, dk, dv, ldd, dout, lddo, att, stats, packed,
                                            accumulate);
  });
}

}  // namespace

bool attention_bf16_avx512_supports(int hd) {
  return KernelHeadDims::supports(hd) && cpu_has_avx512_bf16();
}

// The sizes below are the kernels' whether or not this CPU runs them: a local plan counts
// them for its profile's CPU (model/kernel_target.h).
size_t attention_bf16_avx512_scratch_bytes(int T, int hd) {
  if (!KernelHeadDims::supports(hd)) return 0;
  const size_t t = size_t(T), tp = size_t(round_up(T, kKeyBlock)), R = size_t(bf16_rows(hd));
  // Bf16Scratch as the forward and the backward size it: x, yt, b1, b2, rows, t1, t2, ds and
  // p (the scores and P of the row-statistics forms, the ones the engine runs).
  const size_t words = t * hd / 2 + tp * hd / 2 + 2 * (tp / 2 * hd) + R * tp / 2 + 2 * tp * tp / 2;
  return 4 * (words + 2 * t * t);
}

size_t attention_bf16_avx512_packed_words(int T, int hd) {
  if (!KernelHeadDims::supports(hd)) return 0;
  return (size_t(T) + size_t(round_up(T, kKeyBlock))) * size_t(hd) / 2;  // q rows, k blocks
}

void attention_head_forward_bf16(const AttentionHead& h, float* out, int ldo, float* att,
                                 float* stats, uint32_t* packed) {
  head_forward_bf16(h, out, ldo, att, stats, packed);
}

void attention_head_forward_bf16(const AttentionHead& h, bf16* out, int ldo, float* att,
                                 float* stats, uint32_t* packed) {
  head_forward_bf16(h, out, ldo, att, stats, packed);
}

void attention_head_backward_bf16(const AttentionHead& h, float* dq, float* dk, float* dv, int ldd,
                                  const float* dout, int lddo, const float* att, bool accumulate,
                                  const float* stats, const uint32_t* packed) {
  head_backward_bf16(h, dq, dk, dv, ldd, dout, lddo, att, stats, packed, accumulate);
}

void attention_head_backward_bf16(const AttentionHead& h, bf16* dq, bf16* dk, bf16* dv, int ldd,
                                  const float* dout, int lddo, const float* att, const float* stats,
                                  const uint32_t* packed) {
  // Each gradient row is written once only while one query block covers all of T.
  MT_CHECK(h.T <= kAttentionBf16DirectMaxT, "attention_head_backward_bf16: T ", h.T, " > ",
           kAttentionBf16DirectMaxT);
  head_backward_bf16(h, dq, dk, dv, ldd, dout, lddo, att, stats, packed, false);
}

#else  // no AVX-512: attention.cpp uses the fp32 kernels for every head dim

bool attention_bf16_avx512_supports(int) {
  return false;
}
size_t attention_bf16_avx512_scratch_bytes(int, int) {
  return 0;
}
size_t attention_bf16_avx512_packed_words(int, int) {
  return 0;
}
void attention_head_forward_bf16(const AttentionHead&, float*, int, float*, float*, uint32_t*) {}
void attention_head_forward_bf16(const AttentionHead&, bf16*, int, float*, float*, uint32_t*) {}
void attention_head_backward_bf16(const AttentionHead&, float*, float*, float*, int, const float*,
                                  int, const float*, bool, const float*, const uint32_t*) {}
void attention_head_backward_bf16(const AttentionHead&, bf16*, bf16*, bf16*, int, const float*, int,
                                  const float*, const float*, const uint32_t*) {}

#endif

}  // namespace mt
