// The AMX attention core for one (batch, head) (attention_amx.h).
//
// Operand layouts (T rounded up to Tp, a multiple of 32; everything past T is zero, so
// partial blocks need no special case and no garbage meets a zero probability):
//   rows      q, dout as bf16 rows (Tp, HD): the A side of the scores products;
//   key pairs k, v as (HD / 2, Tp) pairs, pair p of key j at [p][j]: the B side of q k^T,
//             dout v^T (a B tile row holds 16 columns of bf16 pairs along the reduction);
//   inter     v, k with rows 2i and 2i + 1 interleaved, (Tp / 2, HD) pairs: the B side of
//             P v and dS k;
//   columns   q, dout transposed, bf16 (HD, Tp): the A side of dK^T = q^T dS, dV^T = dout^T P;
//   P, dS     per block of 32 query rows, as bf16 rows (A of P v, dS k) and as pairs of rows
//             along the queries, (Tp / 2, Tp) (B of the key-side products).
#include "kernels/attention_amx.h"
#include "kernels/amx_tiles.h"  // amx::available: the one tile-permission request

#if defined(__AVX512F__)
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized (its _mm512_undefined_* placeholders)
// on AVX-512 code inlined into functions carrying the AMX target attribute (as adamw.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/attention_amx_pack.h"
#include "kernels/attention_amx_softmax.h"
#endif

namespace mt {

#if defined(__AVX512F__)
namespace {

using namespace attention_avx512;
using namespace attention_amx;

// Per-thread buffers, grown to the largest head seen (OpenMP workers and rank threads each
// get their own; nothing is allocated once the sizes are known).
struct AmxScratch {
  std::vector<bf16> rows, cols_a, cols_b, block_rows;
  std::vector<u32> keys, inter, pairs_a, pairs_b;
  std::vector<float> stage, out;
  template <class V>
  static typename V::value_type* sized(V& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};
AmxScratch& amx_scratch() {
  thread_local AmxScratch s;
  return s;
}

// The block's 32 output rows from the (32, HD) fp32 stage: rows past T are not stored.
template <int HD, typename OutT>
MT_AMX_ATT void store_rows(OutT* dst, int ldd, const float* o, int rows, bool accumulate) {
  for (int r = 0; r < rows; r++)
    for (int d = 0; d < HD; d += 16)
      store16(dst + size_t(r) * ldd + d, _mm512_loadu_ps(o + r * HD + d), accumulate);
}

// dst (T, HD) rows from the transposed (HD, Tp) fp32 stage st.
template <int HD, typename OutT>
MT_AMX_ATT void store_transposed(OutT* dst, int ldd, const float* st, int T, int Tp,
                                 bool accumulate) {
  for (int j0 = 0; j0 < T; j0 += 16)
    for (int d0 = 0; d0 < HD; d0 += 16) {
      __m512 r[16];
      for (int d = 0; d < 16; d++) r[d] = _mm512_loadu_ps(st + size_t(d0 + d) * Tp + j0);
      transpose16(r);
      for (int j = 0; j < std::min(16, T - j0); j++)
        store16(dst + size_t(j0 + j) * ldd + d0, r[j], accumulate);
    }
}

// Softmax of the block's rows (scores in s, (32, Tp)) into att, and P as bf16 rows (32,
// kcols; rows past T zero).
MT_AMX_ATT void block_probabilities(float* att, int T, float scale, const float* s, int Tp, int i0,
                                    int rows, int kcols, bf16* p) {
  for (int r = 0; r < rows; r++)
    softmax_row_bf16(att + size_t(i0 + r) * T, p + size_t(r) * Tp, s + size_t(r) * Tp, scale,
                     i0 + r + 1, T, kcols);
  for (int r = rows; r < kBlock; r++) std::memset(p + size_t(r) * Tp, 0, sizeof(bf16) * kcols);
}

template <int HD, typename OutT>
MT_AMX_ATT void forward_head(const AttentionHead& h, OutT* out, int ldo, float* att) {
  const int T = h.T, Tp = round_up(T, kBlock);
  AmxScratch& sc = amx_scratch();
  bf16* qr = AmxScratch::sized(sc.rows, size_t(Tp) * HD);
  u32* kt = AmxScratch::sized(sc.keys, size_t(HD / 2) * Tp);
  u32* vi = AmxScratch::sized(sc.inter, size_t(Tp / 2) * HD);
  float* s = AmxScratch::sized(sc.stage, size_t(kBlock) * Tp);
  bf16* p = AmxScratch::sized(sc.block_rows, size_t(kBlock) * Tp);
  float* o = AmxScratch::sized(sc.out, size_t(kBlock) * HD);
  // Phase 1: the operands, bf16, in the tiles' layouts.
  pack_bf16_rows<HD>(qr, h.q, h.ld, T, Tp);
  pack_key_pairs<HD>(kt, h.k, h.ld, T, Tp);
  pack_interleaved<HD>(vi, h.v, h.ld, T, Tp);
  configure_tiles();
  for (int i0 = 0; i0 < T; i0 += kBlock) {
    const int nb = i0 / kBlock + 1, rows = std::min(kBlock, T - i0);
    // Phase 2: the scores of 32 query rows against the key blocks they see.
    for (int jb = 0; jb < nb; jb++)
      block32(s + jb * kBlock, Tp, qr + size_t(i0) * HD, HD, kt + jb * kBlock, Tp, 0, HD / kStep);
    // Phase 3: probabilities (att), bf16 P; then P v.
    block_probabilities(att, T, h.scale, s, Tp, i0, rows, nb * kBlock, p);
    for (int d0 = 0; d0 < HD; d0 += kBlock) block32(o + d0, HD, p, Tp, vi + d0, HD, 0, nb);
    store_rows<HD>(out + size_t(i0) * ldo, ldo, o, rows, false);
  }
  release_tiles();
}

// The backward's operands, packed once per head.
struct BackwardPack {
  bf16 *dor, *qc, *dc;  // dout rows; q and dout as columns
  u32 *vt, *ki;         // v as key pairs, k interleaved
  u32 *dsp, *pp;        // dS and P as pairs along the queries (Tp / 2, Tp)
  float *s, *o;         // a block's dP / dS (32, Tp); the (HD, Tp) stage of dK^T / dV^T
  bf16* ds;             // a block's dS as bf16 rows
};

template <int HD>
MT_AMX_ATT BackwardPack pack_backward(const AttentionHead& h, const float* dout, int lddo, int Tp) {
  const int T = h.T;
  AmxScratch& sc = amx_scratch();
  BackwardPack b;
  b.dor = AmxScratch::sized(sc.rows, size_t(Tp) * HD);
  b.qc = AmxScratch::sized(sc.cols_a, size_t(HD) * Tp);
  b.dc = AmxScratch::sized(sc.cols_b, size_t(HD) * Tp);
  b.vt = AmxScratch::sized(sc.keys, size_t(HD / 2) * Tp);
  b.ki = AmxScratch::sized(sc.inter, size_t(Tp / 2) * HD);
  b.dsp = AmxScratch::sized(sc.pairs_a, size_t(Tp / 2) * Tp);
  b.pp = AmxScratch::sized(sc.pairs_b, size_t(Tp / 2) * Tp);
  b.s = AmxScratch::sized(sc.stage, size_t(kBlock) * Tp);
  b.o = AmxScratch::sized(sc.out, size_t(HD) * Tp);
  b.ds = AmxScratch::sized(sc.block_rows, size_t(kBlock) * Tp);
  pack_bf16_rows<HD>(b.dor, dout, lddo, T, Tp);
  pack_key_pairs<HD>(b.vt, h.v, h.ld, T, Tp);
  pack_interleaved<HD>(b.ki, h.k, h.ld, T, Tp);
  pack_columns<HD>(b.qc, h.q, h.ld, T, Tp);
  pack_columns<HD>(b.dc, dout, lddo, T, Tp);
  return b;
}

// dS of the block's rows (dP in b.s) as bf16 rows and as query pairs; P's query pairs from
// att. Two rows at a time: a pair of rows makes one row of pairs.
MT_AMX_ATT void block_score_grads(const BackwardPack& b, const float* att, int T, float scale,
                                  int Tp, int i0, int rows, int kcols) {
  auto row = [&](int r) {
    return r < rows ? grad_row(att + size_t(i0 + r) * T, b.s + size_t(r) * Tp, i0 + r + 1)
                    : GradRow{};
  };
  for (int r = 0; r < kBlock; r += 2) {
    const size_t pair_row = size_t(i0 / 2 + r / 2) * Tp;
    softmax_grad_pair_bf16(b.ds + size_t(r) * Tp, b.ds + size_t(r + 1) * Tp, b.dsp + pair_row,
                           b.pp + pair_row, row(r), row(r + 1), scale, kcols);
  }
}

// (HD, Tp) stage = cols (HD, Tp) x pairs (Tp / 2, Tp), key block jb reducing over the query
// steps from its own on (earlier queries see none of its keys).
template <int HD>
MT_AMX_ATT void key_side_product(float* st, const bf16* cols, const u32* pairs, int Tp) {
  const int steps = Tp / kStep;
  for (int jb = 0; jb < Tp / kBlock; jb++)
    for (int d0 = 0; d0 < HD; d0 += kBlock)
      block32(st + size_t(d0) * Tp + jb * kBlock, Tp, cols + size_t(d0) * Tp, Tp,
              pairs + jb * kBlock, Tp, jb, steps);
}

template <int HD, typename OutT>
MT_AMX_ATT void backward_head(const AttentionHead& h, OutT* dq, OutT* dk, OutT* dv, int ldd,
                              const float* dout, int lddo, const float* att, bool accumulate) {
  const int T = h.T, Tp = round_up(T, kBlock);
  // Phase 1: operands.
  const BackwardPack b = pack_backward<HD>(h, dout, lddo, Tp);
  configure_tiles();
  // Phase 2: per block of 32 query rows, dP = dout v^T, dS, dq = dS k.
  for (int i0 = 0; i0 < T; i0 += kBlock) {
    const int nb = i0 / kBlock + 1, rows = std::min(kBlock, T - i0);
    for (int jb = 0; jb < nb; jb++)
      block32(b.s + jb * kBlock, Tp, b.dor + size_t(i0) * HD, HD, b.vt + jb * kBlock, Tp, 0,
              HD / kStep);
    block_score_grads(b, att, T, h.scale, Tp, i0, rows, nb * kBlock);
    for (int d0 = 0; d0 < HD; d0 += kBlock) block32(b.o + d0, HD, b.ds, Tp, b.ki + d0, HD, 0, nb);
    store_rows<HD>(dq + size_t(i0) * ldd, ldd, b.o, rows, accumulate);
  }
  // Phase 3: dk^T = q^T dS and dv^T = dout^T P, stored transposed.
  key_side_product<HD>(b.o, b.qc, b.dsp, Tp);
  store_transposed<HD>(dk, ldd, b.o, T, Tp, accumulate);
  key_side_product<HD>(b.o, b.dc, b.pp, Tp);
  store_transposed<HD>(dv, ldd, b.o, T, Tp, accumulate);
  release_tiles();
}

using AmxHeadDims = HeadDimList<32, 64, 128>;

template <class F>
void with_amx_head_dim(int hd, const char* kernel, F&& f) {
  const bool dispatched = AmxHeadDims::dispatch(hd, f);
  MT_CHECK(dispatched, kernel, ": unsupported head dim ", hd);
}

template <typename OutT>
void head_forward(const AttentionHead& h, OutT* out, int ldo, float* att) {
  with_amx_head_dim(h.hd, "attention_head_forward_amx",
                    [&](auto hd) { forward_head<decltype(hd)::value>(h, out, ldo, att); });
}

template <typename OutT>
void head_backward(const AttentionHead& h, OutT* dq, OutT* dk, OutT* dv, int ldd, const float* dout,
                   int lddo, const float* att, bool accumulate) {
  with_amx_head_dim(h.hd, "attention_head_backward_amx", [&](auto hd) {
    backward_head<decltype(hd)::value>(h, dq, dk, dv, ldd, dout, lddo, att, accumulate);
  });
}

}  // namespace

bool attention_amx_supports(int hd) {
  return AmxHeadDims::supports(hd) && __builtin_cpu_supports("avx512bf16") && amx::available();
}

size_t attention_amx_scratch_bytes(int T, int hd) {
  if (!AmxHeadDims::supports(hd) || T <= 0) return 0;
  const size_t tp = size_t(round_up(T, kBlock)), d = size_t(hd), b = kBlock;
  // AmxScratch, each vector at the larger of its forward and backward sizes.
  const size_t bf16_elems = tp * d               // rows: q (forward), dout (backward)
                            + 2 * d * tp         // cols_a, cols_b: q and dout as columns
                            + b * tp;            // block_rows: a block's P / dS
  const size_t u32_elems = d / 2 * tp            // keys: k (forward), v (backward) in key pairs
                           + tp / 2 * d          // inter: v (forward), k (backward) interleaved
                           + 2 * (tp / 2 * tp);  // pairs_a, pairs_b: dS and P along queries
  const size_t float_elems = b * tp              // stage: a block's scores
                             + d * tp;           // out: the (HD, Tp) stage of dK^T / dV^T
  return sizeof(bf16) * bf16_elems + sizeof(u32) * u32_elems + sizeof(float) * float_elems;
}

void attention_head_forward_amx(const AttentionHead& h, float* out, int ldo, float* att) {
  head_forward(h, out, ldo, att);
}
void attention_head_forward_amx(const AttentionHead& h, bf16* out, int ldo, float* att) {
  head_forward(h, out, ldo, att);
}
void attention_head_backward_amx(const AttentionHead& h, float* dq, float* dk, float* dv, int ldd,
                                 const float* dout, int lddo, const float* att, bool accumulate) {
  head_backward(h, dq, dk, dv, ldd, dout, lddo, att, accumulate);
}
void attention_head_backward_amx(const AttentionHead& h, bf16* dq, bf16* dk, bf16* dv, int ldd,
                                 const float* dout, int lddo, const float* att) {
  head_backward(h, dq, dk, dv, ldd, dout, lddo, att, false);
}

#else  // no AVX-512 in this build: attention.cpp never picks these

bool attention_amx_supports(int) {
  return false;
}
size_t attention_amx_scratch_bytes(int, int) {
  return 0;
}
void attention_head_forward_amx(const AttentionHead&, float*, int, float*) {}
void attention_head_forward_amx(const AttentionHead&, bf16*, int, float*) {}
void attention_head_backward_amx(const AttentionHead&, float*, float*, float*, int, const float*,
                                 int, const float*, bool) {}
void attention_head_backward_amx(const AttentionHead&, bf16*, bf16*, bf16*, int, const float*, int,
                                 const float*) {}

#endif

}  // namespace mt

#if defined(__AVX512F__)
#pragma GCC diagnostic pop
#endif
