// The AMX tile product the attention core (attention_amx.cpp) is made of, and the bf16
// packers and stores around it. Included by attention_amx.cpp only, in AVX-512 builds.
//
// A tile product (TDPBF16PS) adds a 16 x 32 bf16 A tile times a 32 x 16 B tile (16 rows of
// bf16 pairs: pair p of column n holds the reduction indices 2p and 2p + 1) into a 16 x 16
// fp32 C tile. block32 keeps a 32 x 32 block of C in tiles 0-3, A in 4-5 and B in 6-7, so
// each step of 32 along the reduction is 4 loads for 4 products; every tile is configured
// 16 rows x 64 bytes once per head (amx::configure_tiles, kernels/amx_tiles.h).
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/amx_tiles.h"
#include "kernels/bf16.h"
#include "kernels/vec_math.h"

#define MT_AMX_ATT __attribute__((target("amx-tile,amx-bf16,avx512bf16")))

namespace mt::attention_amx {

using u32 = uint32_t;

using amx::configure_tiles;
using amx::kBlock;
using amx::kStep;
using amx::kTile;
using amx::release_tiles;

constexpr int round_up(int x, int m) {
  return (x + m - 1) / m * m;
}

// c (32 x 32 fp32, row stride ldc floats) = sum over steps s in [s0, s1) of
// a[:, 32 s .. 32 s + 31] (bf16 rows, stride lda elements) times b's pair rows 16 s ..
// 16 s + 15, columns 0 .. 31 (stride ldb pairs).
MT_AMX_ATT inline void block32(float* c, int ldc, const bf16* a, int lda, const u32* b, int ldb,
                               int s0, int s1) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const size_t as = size_t(lda) * sizeof(bf16), bs = size_t(ldb) * sizeof(u32);
  for (int s = s0; s < s1; ++s) {
    const bf16* a0 = a + s * kStep;
    const u32* b0 = b + size_t(s) * kTile * ldb;
    _tile_loadd(4, a0, as);
    _tile_loadd(5, a0 + size_t(kTile) * lda, as);
    _tile_loadd(6, b0, bs);
    _tile_loadd(7, b0 + kTile, bs);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  const size_t cs = size_t(ldc) * sizeof(float);
  _tile_stored(0, c, cs);
  _tile_stored(1, c + kTile, cs);
  _tile_stored(2, c + size_t(kTile) * ldc, cs);
  _tile_stored(3, c + size_t(kTile) * ldc + kTile, cs);
}

}  // namespace mt::attention_amx

#endif  // __AVX512F__
