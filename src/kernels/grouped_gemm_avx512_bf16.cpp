// The bf16 grouped GEMM on AVX512-BF16 dot products (VDPBF16PS: each fp32 lane adds the
// products of one pair of bf16 in A and B), for CPUs with AVX512-BF16 but no AMX. The
// driver of grouped_gemm_fp32.cpp with bf16 pairs for elements: an item walks K in chunks of
// kChunk, takes the chunk of B as pair panels of 16 columns (the weight packed whole once,
// grouped_gemm.h's GroupedPack, where the call has packs; else packed here) and packs A as
// blocks of 12 rows of pairs (grouped_gemm_pack.h); a 12 x 32 tile of C lives in 24 zmm
// registers for the chunk; each step of 2 in K loads two panel rows and broadcasts 12
// pairs of A. Each C element is one chain of pair products in k order, the chunks
// continuing from the stored partial sum: the same bits whatever the split or the order of
// the tiles.
//
// Tiles run row block by row block, the pairs of panels inside, and each requests the C
// lines of the tile two on (NextTile). Pairs of panels outside, consecutive tiles are 12
// rows apart: with C's rows 2 KB apart (512 columns) a tile's loads of C fall 24 KB, a
// multiple of 4 KB, from the tile before's stores, which the core may take for the same
// lines (4K aliasing). Measured on the weight gradient (which loads C), E 64 of width 256,
// AMD Zen 5 under load, x the dense MLP's GEMM: panels outside 0.55, with the C prefetch
// still 0.55-0.6; rows outside without it 0.54, with it one tile on 0.75, two on 0.9-1.0.

#include "kernels/grouped_gemm_kernels.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/grouped_gemm_pack.h"
#include "kernels/grouped_gemm_prefetch.h"

#define MT_AVX512_BF16 __attribute__((target("avx512bf16")))

namespace mt::grouped {

namespace {

constexpr int kRows = kRowsFp32;                 // rows of a register tile
constexpr int kCols = 2 * kPanelBf16;            // columns of a register tile (two panels)
constexpr int kChunk = 512;                      // K per packed chunk (256 pairs)
constexpr size_t kPackBudget = size_t(1) << 20;  // bytes of a packed chunk per thread
constexpr int kPrefetchEvery = 2;                // pair steps per line of the next item prefetched
constexpr int kAhead = 2;                        // tiles ahead whose C rows a tile prefetches

__mmask16 first(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// The C block a tile kAhead tiles on loads and stores: `rows` rows of 32 columns (ldc
// apart). In the weight gradient (K a group's rows: 64 pair steps at 128 rows a group) C is
// fp32 gradient last touched a step before, in DRAM or L3, and a tile that loads it cold
// waits for its 24 lines; requested for writing one line per step by a tile before, they
// arrive in time (two tiles on; three and four measured the same).
struct NextTile {
  const float* c = nullptr;
  int rows = 0;
};

// c (MR, 32 masked by m0 | m1) [+]= A (MR, kp pairs) @ panels p0 | p1 (kp pairs, 16 each);
// A's pair j of row i is a[j * 12 + i] (pack_row_pairs_bf16's block). Every kPrefetchEvery
// steps it requests one line of `pf` into L2 (Prefetcher), and in its first steps the C
// lines of the tile kAhead on (NextTile).
template <int MR>
MT_AVX512_BF16 void tile(float* c, size_t ldc, __mmask16 m0, __mmask16 m1, const uint32_t* a,
                         const uint32_t* p0, const uint32_t* p1, int kp, bool load_c, Piece pf,
                         NextTile next) {
  __m512 acc[MR][2];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    acc[r][0] = load_c ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    acc[r][1] = load_c ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int j = 0; j < kp; ++j) {
    if (j < 2 * next.rows) __builtin_prefetch(next.c + (j >> 1) * ldc + (j & 1) * 16, 1, 3);
    if (j % kPrefetchEvery == 0 && j / kPrefetchEvery < pf.lines)
      __builtin_prefetch(pf.at + j / kPrefetchEvery * 64, 0, 2);
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(p0 + j * kPanelBf16);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(p1 + j * kPanelBf16);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[j * kRows + r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
  }
}

using TileFn = void (*)(float*, size_t, __mmask16, __mmask16, const uint32_t*, const uint32_t*,
                        const uint32_t*, int, bool, Piece, NextTile);

template <size_t... R>
constexpr std::array<TileFn, kRows> tile_table(std::index_sequence<R...>) {
  return {&tile<int(R) + 1>...};
}
constexpr auto kTiles = tile_table(std::make_index_sequence<kRows>());  // [rows - 1]

struct Scratch {
  std::vector<uint32_t> packed;  // a chunk of B's pair panels for the item's columns
  std::vector<uint32_t> rows;    // the chunk of A in blocks of kRows rows of pairs
  Prefetcher prefetch;           // the next item's operands
};

// Whether the call reads B from weights packed whole (grouped_gemm.h, GroupedPack): the
// pair panels this item would pack (grouped_gemm_pack.h), K padded. Packing B per call was
// about a third of the forward's and the input gradient's time at the experts' shapes (the
// weight transposed from DRAM once per call): with packs they went from 0.6-0.7x to
// 0.8-1.0x the dense MLP's.
bool packed(const Problem<bf16>& p) {
  return p.packed && p.product != Product::backward_weight;
}

// uint32 elements of one panel of a weight packed whole.
size_t packed_panel(const Operands<bf16>& o) {
  return size_t(packed_panel_pairs(o.K)) * kPanelBf16;
}

// An item's panels of a packed weight: one contiguous run from panel n0 / 16 on.
const uint32_t* packed_panels(const Problem<bf16>& p, const Operands<bf16>& o, const Item& it) {
  return p.packed[it.g] + size_t(it.n0 / kPanelBf16) * packed_panel(o);
}

Region packed_region(const Problem<bf16>& p, const Operands<bf16>& o, const Item& it) {
  const size_t panels = size_t(it.n1 - it.n0 + kPanelBf16 - 1) / kPanelBf16;
  return {reinterpret_cast<const char*>(packed_panels(p, o, it)),
          panels * packed_panel(o) * sizeof(uint32_t), 0, 1};
}

void start_prefetch(const Problem<bf16>& p, const Item& next, int64_t steps, Prefetcher& pf) {
  pf.stop();
  if (next.g < 0) return;
  const Operands<bf16> o = operands(p, next.g);
  if (o.M > 0 && o.K > 0)
    pf.start(packed(p) ? packed_region(p, o, next) : b_region(o, next), a_region(o), steps);
}

// The tile kAhead tiles after (i, n) in run_chunk's order (pairs of panels within a block
// of rows, then the next block), or none past the item's last.
NextTile next_tile(const Operands<bf16>& o, int i, int n, int n0, int n1) {
  for (int t = 0; t < kAhead; ++t) {
    n += kCols;
    if (n >= n1) n = n0, i += kRows;
    if (i >= o.M) return {};
  }
  return {o.c + i * o.ldc + n, std::min(kRows, o.M - i)};
}

// The chunk [k0, k1) of one item: every block of rows against every pair of panels. B's
// panels are the packed weight's rows [k0 / 2, k0 / 2 + kp) where the call has packs (the
// same values as packed here), else packed here. An odd panel count pairs the last panel
// with itself: its second half is computed and never stored (mask m1 is empty there).
void run_chunk(const Problem<bf16>& p, const Operands<bf16>& o, const Item& it, int k0, int k1,
               Scratch& s) {
  const int kp = (k1 - k0 + 1) / 2, panels = (it.n1 - it.n0 + kPanelBf16 - 1) / kPanelBf16;
  const uint32_t* b = s.packed.data();
  size_t panel = size_t(kp) * kPanelBf16;
  if (packed(p)) {
    panel = packed_panel(o);
    b = packed_panels(p, o, it) + size_t(k0 / 2) * kPanelBf16;
  } else {
    const bf16* src = o.b_trans ? o.b + k0 : o.b + k0 * o.ldb;
    pack_pairs_bf16(s.packed.data(), src, o.ldb, o.b_trans, k1 - k0, kp, it.n0, it.n1);
  }
  pack_row_pairs_bf16(s.rows.data(), o.a, o.lda, o.a_trans, o.M, k0, k1);
  const bool load_c = o.accumulate || k0 > 0;
  for (int i = 0; i < o.M; i += kRows)
    for (int q = 0; q < panels; q += 2) {
      const int n = it.n0 + q * kPanelBf16;
      const uint32_t* p0 = b + size_t(q) * panel;
      const uint32_t* p1 = q + 1 < panels ? p0 + panel : p0;
      kTiles[std::min(kRows, o.M - i) - 1](
          o.c + i * o.ldc + n, o.ldc, first(it.n1 - n), first(it.n1 - n - 16),
          s.rows.data() + size_t(i) * kp, p0, p1, kp, load_c,
          s.prefetch.take((kp + kPrefetchEvery - 1) / kPrefetchEvery),
          next_tile(o, i, n, it.n0, it.n1));
    }
}

void run_item(const Problem<bf16>& p, const Item& it, const Item& next, Scratch& s) {
  const Operands<bf16> o = operands(p, it.g);
  if (o.M == 0) return;
  if (o.K == 0) {  // an empty sum: C is zero, or unchanged when accumulating
    if (!o.accumulate)
      for (int i = 0; i < o.M; ++i)
        std::memset(o.c + i * o.ldc + it.n0, 0, size_t(it.n1 - it.n0) * sizeof(float));
    return;
  }
  const int panels = (it.n1 - it.n0 + kPanelBf16 - 1) / kPanelBf16;
  const int pairs = (std::min(o.K, kChunk) + 1) / 2, chunks = (o.K + kChunk - 1) / kChunk;
  const int blocks = (o.M + kRows - 1) / kRows;
  start_prefetch(p, next, int64_t(chunks) * ((panels + 1) / 2) * blocks, s.prefetch);
  if (!packed(p)) s.packed.resize(size_t(pairs) * panels * kPanelBf16);
  s.rows.resize(size_t(pairs) * blocks * kRows);
  for (int k0 = 0; k0 < o.K; k0 += kChunk) run_chunk(p, o, it, k0, std::min(o.K, k0 + kChunk), s);
}

}  // namespace

bool avx512_bf16_available() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

void run_avx512_bf16(const Problem<bf16>& p) {
  const Work w = split_work(p.offset, p.groups, p.N(), kChunk, kCols, sizeof(bf16), kPackBudget,
                            omp_get_max_threads());
  for_each_item(
      w, [] {},
      [&](const Item& it, const Item& next) {
        thread_local Scratch scratch;
        run_item(p, it, next, scratch);
      },
      [] {});
}

}  // namespace mt::grouped

#else  // no AVX-512 in this build: no AVX512-BF16 path either

namespace mt::grouped {
bool avx512_bf16_available() {
  return false;
}
void run_avx512_bf16(const Problem<bf16>& p) {
  run_loop(p);
}
}  // namespace mt::grouped

#endif
