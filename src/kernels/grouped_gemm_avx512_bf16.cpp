// The bf16 grouped GEMM on AVX512-BF16 dot products (VDPBF16PS: each fp32 lane adds the
// products of one pair of bf16 in A and B), for CPUs with AVX512-BF16 but no AMX. The
// driver of grouped_gemm_fp32.cpp with bf16 pairs for elements: an item walks K in chunks of
// kChunk, packs the chunk of B as pair panels of 16 columns and A as blocks of 12 rows of
// pairs (grouped_gemm_pack.h), and a 12 x 32 tile of C lives in 24 zmm registers for the
// chunk; each step of 2 in K loads two panel rows and broadcasts 12 pairs of A. Each C
// element is one chain of pair products in k order, the chunks continuing from the stored
// partial sum: the same bits whatever the split.
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

__mmask16 first(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// c (MR, 32 masked by m0 | m1) [+]= A (MR, kp pairs) @ panels p0 | p1 (kp pairs, 16 each);
// A's pair j of row i is a[j * 12 + i] (pack_row_pairs_bf16's block). Every kPrefetchEvery
// steps it requests one line of `pf` into L2 (Prefetcher).
template <int MR>
MT_AVX512_BF16 void tile(float* c, size_t ldc, __mmask16 m0, __mmask16 m1, const uint32_t* a,
                         const uint32_t* p0, const uint32_t* p1, int kp, bool load_c, Piece pf) {
  __m512 acc[MR][2];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    acc[r][0] = load_c ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    acc[r][1] = load_c ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int j = 0; j < kp; ++j) {
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
                        const uint32_t*, int, bool, Piece);

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

void start_prefetch(const Problem<bf16>& p, const Item& next, int64_t steps, Prefetcher& pf) {
  pf.stop();
  if (next.g < 0) return;
  const Operands<bf16> o = operands(p, next.g);
  if (o.M > 0 && o.K > 0) pf.start(b_region(o, next), a_region(o), steps);
}

// The chunk [k0, k1) of one item: every block of rows against every pair of panels.
void run_chunk(const Operands<bf16>& o, const Item& it, int k0, int k1, Scratch& s) {
  const int kp = (k1 - k0 + 1) / 2, panels = (it.n1 - it.n0 + kPanelBf16 - 1) / kPanelBf16;
  const bf16* b = o.b_trans ? o.b + k0 : o.b + k0 * o.ldb;
  pack_pairs_bf16(s.packed.data(), b, o.ldb, o.b_trans, k1 - k0, kp, it.n0, it.n1);
  pack_row_pairs_bf16(s.rows.data(), o.a, o.lda, o.a_trans, o.M, k0, k1);
  const bool load_c = o.accumulate || k0 > 0;
  for (int q = 0; q < panels; q += 2) {
    const int n = it.n0 + q * kPanelBf16;
    const uint32_t* p0 = s.packed.data() + size_t(q) * kp * kPanelBf16;
    for (int i = 0; i < o.M; i += kRows)
      kTiles[std::min(kRows, o.M - i) - 1](
          o.c + i * o.ldc + n, o.ldc, first(it.n1 - n), first(it.n1 - n - 16),
          s.rows.data() + size_t(i) * kp, p0, p0 + size_t(kp) * kPanelBf16, kp, load_c,
          s.prefetch.take((kp + kPrefetchEvery - 1) / kPrefetchEvery));
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
  // An odd panel count pairs the last panel with one more, computed and never stored.
  s.packed.resize(size_t(pairs) * (panels + 1) * kPanelBf16);
  s.rows.resize(size_t(pairs) * blocks * kRows);
  for (int k0 = 0; k0 < o.K; k0 += kChunk) run_chunk(o, it, k0, std::min(o.K, k0 + kChunk), s);
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
