// The fp32 grouped GEMM on AVX-512 FMA. An item (group, block of columns) walks K in chunks
// of kChunk: it packs the chunk of B for its columns (grouped_gemm_pack.h), then every
// 12-row block of A runs against every 32-column panel of it. A 12 x 32 tile of C lives in
// 24 zmm registers for the chunk; each step in K loads one panel row (two zmm) and
// broadcasts 12 elements of A, read in place (A or A^T: both are unit-stride along one
// axis). With a chunk of 256 the A block (12 KB) and the panel (32 KB) stay in L1 while the
// rest of the packed chunk waits in L2. Each C element is one chain of FMAs in k order, the
// chunks continuing from the stored partial sum: the same bits whatever the split.
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

namespace mt::grouped {

namespace {

constexpr int kRows = kRowsFp32;                 // rows of a register tile
constexpr int kChunk = 256;                      // K per packed chunk
constexpr size_t kPackBudget = size_t(1) << 20;  // bytes of a packed chunk per thread
constexpr int kPrefetchEvery = 4;                // steps in K per line of the next item prefetched

__mmask16 first(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// c (MR, 32 masked by m0 | m1) [+]= A (MR, kc) @ panel (kc, 32); A (i, k) = a[k * 12 + i]
// (pack_rows_fp32's block).
// Every kPrefetchEvery steps it requests one line of `pf` into L2 (Prefetcher).
template <int MR>
void tile(float* c, size_t ldc, __mmask16 m0, __mmask16 m1, const float* a, const float* panel,
          int kc, bool load_c, Piece pf) {
  __m512 acc[MR][2];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    acc[r][0] = load_c ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    acc[r][1] = load_c ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int k = 0; k < kc; ++k) {
    if (k % kPrefetchEvery == 0 && k / kPrefetchEvery < pf.lines)
      __builtin_prefetch(pf.at + k / kPrefetchEvery * 64, 0, 2);
    const __m512 b0 = _mm512_loadu_ps(panel + k * kPanelFp32);
    const __m512 b1 = _mm512_loadu_ps(panel + k * kPanelFp32 + 16);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[k * kRows + r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
  }
}

using TileFn = void (*)(float*, size_t, __mmask16, __mmask16, const float*, const float*, int, bool,
                        Piece);

// tiles[rows - 1]
template <size_t... R>
constexpr std::array<TileFn, kRows> tile_table(std::index_sequence<R...>) {
  return {&tile<int(R) + 1>...};
}
constexpr auto kTiles = tile_table(std::make_index_sequence<kRows>());

void zero_columns(float* c, size_t ldc, int rows, int n0, int n1) {
  for (int i = 0; i < rows; ++i) std::memset(c + i * ldc + n0, 0, size_t(n1 - n0) * sizeof(float));
}

struct Scratch {
  std::vector<float> packed;  // a chunk of B's panels for the item's columns
  std::vector<float> rows;    // the chunk of A in blocks of kRows rows
  Prefetcher prefetch;        // the next item's operands
};

// The next item's memory, spread over this item's `steps` tile calls.
void start_prefetch(const Problem<float>& p, const Item& next, int64_t steps, Prefetcher& pf) {
  pf.stop();
  if (next.g < 0) return;
  const Operands<float> o = operands(p, next.g);
  if (o.M > 0 && o.K > 0) pf.start(b_region(o, next), a_region(o), steps);
}

// One item: group it.g's columns [it.n0, it.n1).
void run_item(const Problem<float>& p, const Item& it, const Item& next, Scratch& s) {
  const Operands<float> o = operands(p, it.g);
  if (o.M == 0) return;
  if (o.K == 0) {  // an empty sum: C is zero, or unchanged when accumulating
    if (!o.accumulate) zero_columns(o.c, o.ldc, o.M, it.n0, it.n1);
    return;
  }
  const int panels = (it.n1 - it.n0 + kPanelFp32 - 1) / kPanelFp32;
  const int chunks = (o.K + kChunk - 1) / kChunk;
  start_prefetch(p, next, int64_t(chunks) * panels * ((o.M + kRows - 1) / kRows), s.prefetch);
  s.packed.resize(size_t(std::min(o.K, kChunk)) * panels * kPanelFp32);
  s.rows.resize(size_t(std::min(o.K, kChunk)) * ((o.M + kRows - 1) / kRows * kRows));
  for (int k0 = 0; k0 < o.K; k0 += kChunk) {
    const int k1 = std::min(o.K, k0 + kChunk), kc = k1 - k0;
    pack_panels_fp32(s.packed.data(), o.b, o.ldb, o.b_trans, k0, k1, it.n0, it.n1);
    pack_rows_fp32(s.rows.data(), o.a, o.lda, o.a_trans, o.M, k0, k1);
    const bool load_c = o.accumulate || k0 > 0;
    for (int q = 0; q < panels; ++q) {
      const int n = it.n0 + q * kPanelFp32;
      const float* panel = s.packed.data() + size_t(q) * kc * kPanelFp32;
      for (int i = 0; i < o.M; i += kRows)
        kTiles[std::min(kRows, o.M - i) - 1](
            o.c + i * o.ldc + n, o.ldc, first(it.n1 - n), first(it.n1 - n - 16),
            s.rows.data() + size_t(i) * kc, panel, kc, load_c,
            s.prefetch.take((kc + kPrefetchEvery - 1) / kPrefetchEvery));
    }
  }
}

}  // namespace

bool fp32_kernels_available() {
  return __builtin_cpu_supports("avx512f");
}

void run_fp32(const Problem<float>& p) {
  const int N = p.N();
  const Work w = split_work(p.offset, p.groups, N, kChunk, kPanelFp32, sizeof(float), kPackBudget,
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

#else  // no AVX-512 in this build: the loop runs instead

namespace mt::grouped {
bool fp32_kernels_available() {
  return false;
}
void run_fp32(const Problem<float>& p) {
  run_loop(p);
}
}  // namespace mt::grouped

#endif
