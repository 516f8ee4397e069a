// Flash attention's products on AMX tiles (--precision bf16 where the CPU has AMX and Linux
// grants the tile state; flash_attention.cpp picks them before the AVX512-BF16 ones). The
// layouts are the AVX512-BF16 table's (flash_attention_bf16.cpp), and so are its packers:
//   rows       q, dout as bf16 rows: an A tile reads 16 rows of 32 dims;
//   key block  (hd / 2, 32) pairs, pair p of key j at [p][j]: a B tile reads 16 pairs of 16
//              keys, so scores = q k^T is TDPBF16PS straight from the packed operands;
//   reduction  rows 2i and 2i + 1 interleaved, (pairs, hd): a B tile reads 16 pairs of 16
//              dims, for P v, dS k (pairs along keys) and P^T dout, dS^T q (along queries).
// Only the probabilities (and their gradient) change form per call: rounded to bf16 rows
// (P v, dS k), or transposed to keys x queries (the key-side products), as the AVX512-BF16
// kernels round them, so both paths multiply the same bf16 values. A group of rows short of
// 16 goes through zero-padded stages: tiles never read or write past an operand.
// The drivers load the tile configuration once per task (Tiles::enter) and release it after.
#include "kernels/amx_tiles.h"  // amx::available: the one tile-permission request
#include "kernels/flash_attention_tiles.h"

#if defined(__AVX512F__)
// GCC 12's avx512fintrin.h trips -Wmaybe-uninitialized (its _mm512_undefined_* placeholders)
// on AVX-512 code inlined into functions carrying the AMX target attribute (as adamw.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <algorithm>
#include <cstring>

#include "kernels/attention_amx_tiles.h"
#include "kernels/flash_attention_simd.h"
#endif

namespace mt::flash {

#if defined(__AVX512F__)
namespace {

using attention_amx::kTile;
using attention_amx::u32;

constexpr int kB = kFlashKeyBlock;  // one tile step along the keys

MT_AMX_ATT void enter() {
  attention_amx::configure_tiles();
}
MT_AMX_ATT void leave() {
  attention_amx::release_tiles();
}

MT_AMX_ATT inline __m256i bf16x16(__m512 x) {
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
}

// s (rows, 32) = alpha * x . block^T, 16 query rows at a time.
template <int HD>
MT_AMX_ATT void scores(float* s, const float* x, int rows, const float* blk, float alpha, int) {
  alignas(64) bf16 xs[kTile * HD];
  alignas(64) float ss[kTile * kB];
  const __m512 va = _mm512_set1_ps(alpha);
  for (int r0 = 0; r0 < rows; r0 += kTile) {
    const int n = std::min(kTile, rows - r0);
    const bf16* a = reinterpret_cast<const bf16*>(x + size_t(r0) * (HD / 2));
    if (n < kTile) {  // the packed rows may end here
      std::memset(xs, 0, sizeof xs);
      std::memcpy(xs, a, sizeof(bf16) * n * HD);
      a = xs;
    }
    _tile_zero(0);
    _tile_zero(1);
    for (int st = 0; st < HD / 32; st++) {
      _tile_loadd(2, a + 32 * st, HD * sizeof(bf16));
      _tile_loadd(3, blk + size_t(st) * kTile * kB, kB * sizeof(float));
      _tile_loadd(4, blk + size_t(st) * kTile * kB + kTile, kB * sizeof(float));
      _tile_dpbf16ps(0, 2, 3);
      _tile_dpbf16ps(1, 2, 4);
    }
    _tile_stored(0, ss, kB * sizeof(float));
    _tile_stored(1, ss + kTile, kB * sizeof(float));
    for (int r = 0; r < n; r++)
      for (int c = 0; c < kB; c += 16)
        _mm512_storeu_ps(s + size_t(r0 + r) * kB + c,
                         _mm512_mul_ps(_mm512_load_ps(ss + r * kB + c), va));
  }
}

// c (rows, HD), row stride ldc, += a (rows, 32) . r (16 pairs of keys, HD).
template <int HD>
MT_AMX_ATT void rows_by_keys(float* c, size_t ldc, const float* a, int rows, const float* r, int) {
  alignas(64) bf16 ab[kTile * kB];
  alignas(64) float cs[kTile * HD];
  for (int r0 = 0; r0 < rows; r0 += kTile) {
    const int n = std::min(kTile, rows - r0);
    for (int i = 0; i < kTile; i++)
      for (int j = 0; j < kB; j += 16)
        _mm256_store_si256(
            reinterpret_cast<__m256i*>(ab + i * kB + j),
            i < n ? bf16x16(_mm512_loadu_ps(a + size_t(r0 + i) * kB + j)) : _mm256_setzero_si256());
    float* cp = c + size_t(r0) * ldc;
    size_t cst = ldc * sizeof(float);
    if (n < kTile) {  // the rows past n belong to someone else
      std::memset(cs, 0, sizeof cs);
      for (int i = 0; i < n; i++) std::memcpy(cs + i * HD, cp + i * ldc, sizeof(float) * HD);
      cp = cs, cst = HD * sizeof(float);
    }
    _tile_loadd(1, ab, kB * sizeof(bf16));
    for (int d0 = 0; d0 < HD; d0 += kTile) {
      _tile_loadd(0, cp + d0, cst);
      _tile_loadd(2, r + d0, HD * sizeof(float));
      _tile_dpbf16ps(0, 1, 2);
      _tile_stored(0, cp + d0, cst);
    }
    if (n < kTile)
      for (int i = 0; i < n; i++)
        std::memcpy(c + size_t(r0 + i) * ldc, cs + i * HD, sizeof(float) * HD);
  }
}

// at (32 keys, qp queries) bf16 = a (qrows, 32)^T, queries past qrows zero.
MT_AMX_ATT void transpose_to_bf16(bf16* at, int qp, const float* a, int qrows) {
  for (int i0 = 0; i0 < qp; i0 += 16)
    for (int j0 = 0; j0 < kB; j0 += 16) {
      __m512 t[16];
      for (int i = 0; i < 16; i++)
        t[i] = i0 + i < qrows ? _mm512_loadu_ps(a + size_t(i0 + i) * kB + j0) : _mm512_setzero_ps();
      transpose16(t);
      for (int j = 0; j < 16; j++)
        _mm256_store_si256(reinterpret_cast<__m256i*>(at + size_t(j0 + j) * qp + i0),
                           bf16x16(t[j]));
    }
}

// c (32, HD) += a^T . r, a (qrows, 32), r the (qrows + 1) / 2 query pairs of HD.
template <int HD>
MT_AMX_ATT void keys_by_rows(float* c, const float* a, int qrows, const float* r, int) {
  alignas(64) bf16 at[kB * kFlashQueryBlock];
  alignas(64) u32 rs[kFlashQueryBlock / 2 * HD];
  const int np = (qrows + 1) / 2, steps = (np + kTile - 1) / kTile, qp = steps * 32;
  transpose_to_bf16(at, qp, a, qrows);
  const float* rb = r;
  if (np < steps * kTile) {  // pairs past np: zeros, not whatever follows the operand
    std::memcpy(rs, r, sizeof(u32) * np * HD);
    std::memset(rs + np * HD, 0, sizeof(u32) * (steps * kTile - np) * HD);
    rb = reinterpret_cast<const float*>(rs);
  }
  for (int j0 = 0; j0 < kB; j0 += kTile)
    for (int d0 = 0; d0 < HD; d0 += kTile) {
      float* cp = c + size_t(j0) * HD + d0;
      _tile_loadd(0, cp, HD * sizeof(float));
      for (int st = 0; st < steps; st++) {
        _tile_loadd(1, at + size_t(j0) * qp + 32 * st, qp * sizeof(bf16));
        _tile_loadd(2, rb + size_t(st) * kTile * HD + d0, HD * sizeof(float));
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, cp, HD * sizeof(float));
    }
}

template <int HD>
const Tiles* table() {
  static const Tiles t = [] {
    Tiles x = *tiles_avx512_bf16(HD);  // the packers and layouts
    x.name = "amx-bf16";
    x.scores = scores<HD>;
    x.rows_by_keys = rows_by_keys<HD>;
    x.keys_by_rows = keys_by_rows<HD>;
    x.enter = enter;
    x.leave = leave;
    return x;
  }();
  return &t;
}

}  // namespace

const Tiles* tiles_amx_bf16(int hd) {
  if (!tiles_avx512_bf16(hd) || !amx::available()) return nullptr;
  return tiles_for_head_dim(hd, [](auto head_dim) -> const Tiles* {
    constexpr int HD = decltype(head_dim)::value;
    if constexpr (HD == 16)
      return nullptr;  // half a tile step
    else
      return table<HD>();
  });
}

#else  // no AVX-512 in this build: no AMX tiles either

const Tiles* tiles_amx_bf16(int) {
  return nullptr;
}

#endif

}  // namespace mt::flash

#if defined(__AVX512F__)
#pragma GCC diagnostic pop
#endif
