// What every AMX kernel shares: the permission to use the tiles, and the one tile shape the
// kernels use (all 8 tiles 16 rows x 64 bytes). The grouped GEMM (grouped_gemm_amx.cpp) and
// the attention cores (attention_amx.cpp, flash_attention_amx.cpp) all run on it.
//
// A tile product (TDPBF16PS) adds a 16 x 32 bf16 A tile times a 32 x 16 B tile (16 rows of
// bf16 pairs) into a 16 x 16 fp32 C tile; the kernels keep a 32 x 32 block of C in tiles 0-3,
// two A tiles in 4-5 and two B tiles in 6-7.
#pragma once

namespace mt::amx {

// True when the CPU has AMX-TILE and AMX-BF16 and Linux granted this process the tile state
// (asked once, on first call). False in builds without AVX-512.
bool available();

}  // namespace mt::amx

#if defined(__AVX512F__)
#include <immintrin.h>

#include <cstdint>

namespace mt::amx {

constexpr int kTile = 16;   // rows of every tile; fp32 columns of a C tile
constexpr int kStep = 32;   // reduction per tile product: one 64-byte tile row of bf16
constexpr int kBlock = 32;  // rows and columns of a C block (2 x 2 tiles)

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows of 64 bytes, once per thread and call. Not _tile_loadconfig: GCC 12
// declares its operand as the configuration's first 8 bytes only, so the stores of the rest
// could be dropped as dead (and were: the next tile instruction faulted); this asm reads the
// whole object.
__attribute__((target("amx-tile"))) inline void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = kTile, cfg.colsb[t] = 64;
  asm volatile("ldtilecfg %0" ::"m"(cfg));
}

__attribute__((target("amx-tile"))) inline void release_tiles() {
  _tile_release();
}

}  // namespace mt::amx

#endif  // __AVX512F__
