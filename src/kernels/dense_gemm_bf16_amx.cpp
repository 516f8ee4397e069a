// The dense bf16 linears' AMX tile driver with its epilogues in the stores
// (dense_gemm_bf16_amx.h).
#include "kernels/dense_gemm_bf16_amx.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/amx_tiles.h"
#include "kernels/gelu.h"

#define MT_AMX __attribute__((target("amx-tile,amx-bf16")))

namespace mt::dense_amx {

namespace {

using amx::kBlock;
using amx::kStep;
using amx::kTile;
// Bytes of packed B a column block may hold: it stays in L2 while every row block of the
// item streams past it (the grouped kernel's budget).
constexpr size_t kPackBudget = size_t(1) << 20;

int round_up(int x, int m) {
  return (x + m - 1) / m * m;
}

// Where the accumulator tiles start: zero, C itself, or the bias broadcast over the rows.
enum class Start { zero, c, bias };

// C (16 TM, 16 TN) = start + A (16 TM, 32 steps) @ B panels: tiles 0-3 C, 4-5 A, 6-7 B.
// `panel` is the distance between two B panels; a panel's step s starts 256 words on.
template <int TM, int TN>
MT_AMX void block(float* c, size_t ldc, const bf16* a, size_t lda, const uint32_t* b, size_t panel,
                  int steps, Start start, const float* bias) {
  const size_t cs = ldc * sizeof(float), as = lda * sizeof(bf16);
  float* c1 = c + kTile * ldc;
  if (start == Start::c) {
    _tile_loadd(0, c, cs);
    if constexpr (TN == 2) _tile_loadd(1, c + kTile, cs);
    if constexpr (TM == 2) _tile_loadd(2, c1, cs);
    if constexpr (TM == 2 && TN == 2) _tile_loadd(3, c1 + kTile, cs);
  } else if (start == Start::bias) {  // row stride 0: every row of the tile is the bias
    _tile_loadd(0, bias, 0);
    if constexpr (TN == 2) _tile_loadd(1, bias + kTile, 0);
    if constexpr (TM == 2) _tile_loadd(2, bias, 0);
    if constexpr (TM == 2 && TN == 2) _tile_loadd(3, bias + kTile, 0);
  } else {
    _tile_zero(0);
    if constexpr (TN == 2) _tile_zero(1);
    if constexpr (TM == 2) _tile_zero(2);
    if constexpr (TM == 2 && TN == 2) _tile_zero(3);
  }
  const bf16* a1 = a + kTile * lda;
  const uint32_t* b1 = b + panel;
  for (int s = 0; s < steps; ++s) {
    _tile_loadd(4, a + s * kStep, as);
    if constexpr (TM == 2) _tile_loadd(5, a1 + s * kStep, as);
    _tile_loadd(6, b + s * kTile * kTile, 64);
    if constexpr (TN == 2) _tile_loadd(7, b1 + s * kTile * kTile, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (TN == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (TM == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (TM == 2 && TN == 2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, cs);
  if constexpr (TN == 2) _tile_stored(1, c + kTile, cs);
  if constexpr (TM == 2) _tile_stored(2, c1, cs);
  if constexpr (TM == 2 && TN == 2) _tile_stored(3, c1 + kTile, cs);
}

using BlockFn = void (*)(float*, size_t, const bf16*, size_t, const uint32_t*, size_t, int, Start,
                         const float*);
constexpr BlockFn kBlocks[2][2] = {{&block<1, 1>, &block<1, 2>}, {&block<2, 1>, &block<2, 2>}};

struct Scratch {
  std::vector<float> edge = std::vector<float>(kBlock * kBlock);  // a C block short of tiles
  std::vector<bf16> a_rows;  // a short last row block of an in-place A, zero-padded
  std::vector<float> out;    // dgelu: one row block of the product (kBlock x the item's width)
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// One C block of tm x tn tiles at c, of which rows x cols are C's: a block short of its
// tiles runs in the edge stage (started as the block would be) and is copied back.
void run_block(int tm, int tn, float* c, size_t ldc, int rows, int cols, const bf16* a, size_t lda,
               const uint32_t* b, size_t panel, int steps, Start start, const float* bias,
               float* edge) {
  const BlockFn fn = kBlocks[tm - 1][tn - 1];
  if (rows == tm * kTile && cols == tn * kTile)
    return fn(c, ldc, a, lda, b, panel, steps, start, bias);
  std::fill(edge, edge + kBlock * kBlock, 0.0f);
  for (int i = 0; i < rows && start != Start::zero; ++i)
    std::memcpy(edge + i * kBlock, start == Start::c ? c + i * ldc : bias, size_t(cols) * 4);
  fn(edge, kBlock, a, lda, b, panel, steps, start == Start::zero ? Start::zero : Start::c, nullptr);
  for (int i = 0; i < rows; ++i) std::memcpy(c + i * ldc, edge + i * kBlock, size_t(cols) * 4);
}

// How the call is cut: K in steps, N in panels of kTile columns grouped into column blocks,
// M in chunks of 32-row blocks; an item is (column block, row chunk).
struct Layout {
  int kp, steps, panels;
  size_t panel;  // words of one packed panel
  int block_panels, col_blocks, chunk_rows, row_chunks;
  bool in_place;  // A read where it is (K a multiple of kStep)

  Layout(const Gemm& g, int threads) {
    kp = round_up(g.K, kStep), steps = kp / kStep;
    panels = (g.N + kTile - 1) / kTile;
    panel = size_t(kp / 2) * kTile;
    const size_t budget_panels = std::max<size_t>(2, kPackBudget / (panel * sizeof(uint32_t)));
    block_panels = std::min(panels, int(budget_panels / 2 * 2));
    col_blocks = (panels + block_panels - 1) / block_panels;
    // Two items per thread at least, the columns split first (each thread then reads only
    // its panels), then the rows.
    const int row_blocks = (g.M + kBlock - 1) / kBlock;
    if (threads > 1 && col_blocks < 2 * threads) {
      const int want_cols = std::min((panels + 1) / 2, 2 * threads);
      block_panels = round_up((panels + want_cols - 1) / want_cols, 2);
      col_blocks = (panels + block_panels - 1) / block_panels;
    }
    row_chunks = threads > 1 ? std::clamp((2 * threads + col_blocks - 1) / col_blocks, 1,
                                          std::max(1, row_blocks))
                             : 1;
    chunk_rows = (row_blocks + row_chunks - 1) / row_chunks * kBlock;
    row_chunks = std::max(1, (g.M + chunk_rows - 1) / chunk_rows);
    in_place = g.K == kp;
  }
  int items() const { return col_blocks * row_chunks; }
};

// A's 32-row block from row i, as the tiles may read it: in place, or its rows copied to a
// zero-padded stage when tile loads would read past the last row.
const bf16* a_block(const bf16* a, size_t lda, bool in_place, int i, int rows, int kp, Scratch& s,
                    size_t& ldai) {
  const int tm = rows > kTile ? 2 : 1;
  ldai = lda;
  if (!in_place || rows == tm * kTile) return a + size_t(i) * lda;
  s.a_rows.assign(size_t(tm) * kTile * kp, 0);
  for (int r = 0; r < rows; ++r)
    std::memcpy(s.a_rows.data() + size_t(r) * kp, a + size_t(i + r) * lda,
                size_t(kp) * sizeof(bf16));
  ldai = kp;
  return s.a_rows.data();
}

// The epilogue of rows [i, i + rows) x columns [n0, n1) once their products are all in.
void epilogue_rows(const Gemm& g, const Scratch& s, int i, int rows, int n0, int n1) {
  const size_t N = size_t(g.N), width = size_t(n1 - n0);
  for (int r = 0; r < rows; ++r) {
    const size_t at = size_t(i + r) * N + n0;
    if (g.epilogue == Epilogue::gelu)
      gelu_forward_bf16_row(g.act + at, g.c + at, int(width));
    else
      gelu_backward_bf16_row(g.act + at, g.pre + at, s.out.data() + r * width, int(width));
  }
}

// Rows [r0, r1) x panels [p0, p1) of C, a 32-row block at a time against the item's panels.
void run_item(const Gemm& g, const Layout& L, const bf16* a, size_t lda, int r0, int r1, int p0,
              int p1, Scratch& s) {
  const int n0 = p0 * kTile, n1 = std::min(g.N, p1 * kTile), width = n1 - n0;
  const bool staged = g.epilogue == Epilogue::dgelu;
  if (staged) s.out.resize(size_t(kBlock) * width);
  const Start start = g.accumulate ? Start::c : g.bias ? Start::bias : Start::zero;
  for (int i = r0; i < r1; i += kBlock) {
    const int rows = std::min(kBlock, g.M - i), tm = rows > kTile ? 2 : 1;
    size_t ldai = lda;
    const bf16* ai = a_block(a, lda, L.in_place, i, rows, L.kp, s, ldai);
    for (int q = p0; q < p1; q += 2) {
      const int tn = q + 1 < p1 ? 2 : 1, n = q * kTile;
      float* c = staged ? s.out.data() + (n - n0) : g.c + size_t(i) * g.N + n;
      run_block(tm, tn, c, staged ? size_t(width) : size_t(g.N), rows, std::min(n1 - n, tn * kTile),
                ai, ldai, g.b + size_t(q) * L.panel, L.panel, L.steps, start,
                g.bias ? g.bias + n : nullptr, s.edge.data());
    }
    if (g.epilogue != Epilogue::none) epilogue_rows(g, s, i, rows, n0, n1);
  }
}

// A as whole tiles when K is not a multiple of kStep: rows padded to kBlock, K to kp.
const bf16* padded_a(const Gemm& g, int kp, std::vector<bf16>& buf) {
  const int rows = round_up(g.M, kBlock);
  buf.assign(size_t(rows) * kp, 0);
  for (int i = 0; i < g.M; ++i)
    std::memcpy(buf.data() + size_t(i) * kp, g.a + size_t(i) * g.K, size_t(g.K) * sizeof(bf16));
  return buf.data();
}

}  // namespace

void run(const Gemm& g) {
  if (g.M <= 0 || g.N <= 0) return;
  const int threads = omp_get_max_threads();
  const Layout L(g, threads);
  thread_local std::vector<bf16> padded;
  const bf16* a = L.in_place ? g.a : padded_a(g, L.kp, padded);
  const size_t lda = L.in_place ? size_t(g.K) : size_t(L.kp);
  const int items = L.items(), team = std::min(threads, items);
#pragma omp parallel num_threads(team) if (team > 1)
  {
    amx::configure_tiles();
#pragma omp for schedule(static)
    for (int it = 0; it < items; ++it) {
      const int cb = it / L.row_chunks, rc = it % L.row_chunks;
      const int p0 = cb * L.block_panels, p1 = std::min(L.panels, p0 + L.block_panels);
      const int r0 = rc * L.chunk_rows, r1 = std::min(g.M, r0 + L.chunk_rows);
      run_item(g, L, a, lda, r0, r1, p0, p1, scratch());
    }
    amx::release_tiles();
  }
}

}  // namespace mt::dense_amx

#else  // no AVX-512 in this build: no AMX path either

#include "core/error.h"

namespace mt::dense_amx {
void run(const Gemm&) {
  MT_CHECK(false, "dense bf16 GEMM on AMX tiles: no AMX in this build");
}
}  // namespace mt::dense_amx

#endif
