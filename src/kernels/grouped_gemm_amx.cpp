// The bf16 grouped GEMM on AMX tiles. A tile product (TDPBF16PS) adds a 16 x 32 bf16 A tile
// times a 32 x 16 B tile (16 rows of bf16 pairs) into a 16 x 16 fp32 C tile. The 8 tile
// registers hold a 32 x 32 block of C (4 tiles), two A tiles and two B tiles, so each step of
// 32 in K is 4 loads for 4 products. An item (group, block of columns) packs its B columns
// once as pair panels (grouped_gemm_pack.h), or reads them from the weight's whole packs
// when the call has them (GroupedPack: forward and backward_input), then every 32-row block of A
// runs against every pair of panels over the whole K: C stays in tiles from the first step to the
// last, and A (read in place when it is row-major with K a multiple of 32, else a zero-padded copy)
// is the operand reused from L1 while B streams from L2. Edges (rows or columns short of a tile) go
// through zero-padded stages, so tiles are always 16 x 64 bytes and the configuration is loaded
// once per call and thread. K is summed in steps of 32 in order, so a row's bits do not depend on
// the block it fell in.
#include "kernels/grouped_gemm_kernels.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/amx_tiles.h"
#include "kernels/grouped_gemm_pack.h"
#include "kernels/grouped_gemm_prefetch.h"
#include "kernels/swiglu.h"
#include "kernels/token_permutation.h"

#define MT_AMX __attribute__((target("amx-tile,amx-bf16")))

namespace mt::grouped {

namespace {

using amx::configure_tiles;
using amx::kBlock;
using amx::kStep;
using amx::kTile;
using amx::release_tiles;
constexpr size_t kPackBudget = size_t(1) << 20;  // bytes of packed B per thread
constexpr int kPrefetchPerStep = 4;              // lines of the next item per step in K

int round_up(int x, int m) {
  return (x + m - 1) / m * m;
}

// C (16 TM, 16 TN) [+]= A (16 TM, 32 steps) @ B panels: tiles 0-3 C, 4-5 A, 6-7 B.
// `panel` is the distance between two B panels; a panel's step s starts 256 words on.
// Each step also requests up to kPrefetchPerStep lines of `pf` into L2 (Prefetcher).
template <int TM, int TN>
MT_AMX void block(float* c, size_t ldc, const bf16* a, size_t lda, const uint32_t* b, size_t panel,
                  int steps, bool load_c, Piece pf) {
  const size_t cs = ldc * sizeof(float), as = lda * sizeof(bf16);
  float* c1 = c + kTile * ldc;
  if (load_c) {
    _tile_loadd(0, c, cs);
    if constexpr (TN == 2) _tile_loadd(1, c + kTile, cs);
    if constexpr (TM == 2) _tile_loadd(2, c1, cs);
    if constexpr (TM == 2 && TN == 2) _tile_loadd(3, c1 + kTile, cs);
  } else {
    _tile_zero(0);
    if constexpr (TN == 2) _tile_zero(1);
    if constexpr (TM == 2) _tile_zero(2);
    if constexpr (TM == 2 && TN == 2) _tile_zero(3);
  }
  const bf16* a1 = a + kTile * lda;
  const uint32_t* b1 = b + panel;
  for (int s = 0; s < steps; ++s) {
    for (int l = s * kPrefetchPerStep; l < std::min(pf.lines, (s + 1) * kPrefetchPerStep); ++l)
      __builtin_prefetch(pf.at + l * 64, 0, 2);
    _tile_loadd(4, a + s * kStep, as);
    if constexpr (TM == 2) _tile_loadd(5, a1 + s * kStep, as);
    _tile_stream_loadd(6, b + s * kTile * kTile, 64);
    if constexpr (TN == 2) _tile_stream_loadd(7, b1 + s * kTile * kTile, 64);
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

using BlockFn = void (*)(float*, size_t, const bf16*, size_t, const uint32_t*, size_t, int, bool,
                         Piece);
constexpr BlockFn kBlocks[2][2] = {{&block<1, 1>, &block<1, 2>}, {&block<2, 1>, &block<2, 2>}};

struct Scratch {
  Prefetcher prefetch;       // the next item's operands
  std::vector<uint32_t> b;   // B's pair panels for the item's columns
  std::vector<bf16> a;       // A zero-padded to whole tiles, when it cannot be read in place
  int a_group = -1;          // the group whose A `a` holds in this call (-1: none)
  std::vector<bf16> a_rows;  // a short last row block of an in-place A
  std::vector<float> c = std::vector<float>(kBlock * kBlock);  // a C block short of tiles
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// The block of C at rows [0, rows) and columns [0, cols) of c, tm x tn tiles; a block
// short of its tiles is computed in the stage and copied back.
void run_block(int tm, int tn, float* c, size_t ldc, int rows, int cols, const bf16* a, size_t lda,
               const uint32_t* b, size_t panel, int steps, bool load_c, float* stage, Piece pf) {
  const BlockFn fn = kBlocks[tm - 1][tn - 1];
  if (rows == tm * kTile && cols == tn * kTile)
    return fn(c, ldc, a, lda, b, panel, steps, load_c, pf);
  std::fill(stage, stage + kBlock * kBlock, 0.0f);
  if (load_c)
    for (int i = 0; i < rows; ++i) std::memcpy(stage + i * kBlock, c + i * ldc, cols * 4);
  fn(stage, kBlock, a, lda, b, panel, steps, load_c, pf);
  for (int i = 0; i < rows; ++i) std::memcpy(c + i * ldc, stage + i * kBlock, cols * 4);
}

// A as whole tiles: rows padded to kBlock and K to kp, from A^T or from a row-major A
// whose K is not a multiple of kStep.
const bf16* padded_a(const Operands<bf16>& o, int kp, std::vector<bf16>& buf) {
  const int rows = round_up(o.M, kBlock);
  buf.resize(size_t(rows) * kp);
  if (o.a_trans) {
    transpose_bf16_padded(buf.data(), kp, o.a, o.lda, o.K, o.M);
  } else {
    for (int i = 0; i < o.M; ++i) {
      std::memcpy(buf.data() + size_t(i) * kp, o.a + i * o.lda, size_t(o.K) * sizeof(bf16));
      std::memset(buf.data() + size_t(i) * kp + o.K, 0, size_t(kp - o.K) * sizeof(bf16));
    }
  }
  std::memset(buf.data() + size_t(o.M) * kp, 0, size_t(rows - o.M) * kp * sizeof(bf16));
  return buf.data();
}

bool packed(const Problem<bf16>& p) {
  return p.packed && p.product != Product::backward_weight;
}

// An item's whole panels of a packed weight: one contiguous run.
const uint32_t* packed_panels(const Problem<bf16>& p, const Item& it, size_t panel) {
  return p.packed[it.g] + size_t(it.n0 / kTile) * panel;
}

Region packed_region(const Problem<bf16>& p, const Operands<bf16>& o, const Item& it) {
  const size_t panel = size_t(round_up(o.K, kStep) / 2) * kTile;
  const size_t panels = size_t(it.n1 - it.n0 + kTile - 1) / kTile;
  return {reinterpret_cast<const char*>(packed_panels(p, it, panel)),
          panels * panel * sizeof(uint32_t), 0, 1};
}

// The next item's memory, spread over this item's `steps` block calls.
void start_prefetch(const Problem<bf16>& p, const Item& next, int64_t steps, Prefetcher& pf) {
  pf.stop();
  if (next.g < 0) return;
  const Operands<bf16> o = operands(p, next.g);
  if (o.M == 0 || o.K == 0) return;
  pf.start(packed(p) ? packed_region(p, o, next) : b_region(o, next), a_region(o), steps);
}

// Requests the C block after (i, q) into L2 (for writing) while (i, q) computes. With the
// accumulating products (backward_weight: K is a group's rows, often a few dozen) a block
// is only a few tile steps, and its C tiles, read from memory, would stall each block.
void prefetch_c(const Operands<bf16>& o, const Item& it, int i, int q, int panels) {
  if (q >= panels) i += kBlock, q = 0;
  if (i >= o.M) return;
  const float* c = o.c + i * o.ldc + it.n0 + q * kTile;
  const int cols = std::min(it.n1 - it.n0 - q * kTile, kBlock);
  for (int r = 0; r < std::min(kBlock, o.M - i); ++r)
    for (int col = 0; col < cols; col += 16) __builtin_prefetch(c + r * o.ldc + col, 1, 2);
}

// One row block of an item's results that never go to memory (32 x the item's columns),
// per thread: the SwiGLU backward's d_act, the input gradients summed into tokens.
static_assert(kBlock == 32, "grouped_bf16_swiglu_scratch_bytes counts 32 rows of the stage");
std::vector<float>& row_block_stage() {
  thread_local std::vector<float> stage;
  return stage;
}

// A 32-row block of an item summed into the token rows (Problem::tokens) once all its
// columns are computed: each row, from `out` where the call keeps the rows, else from the
// stage (ld wide), added to its token's row over the item's columns [n0, n1), scaled by its
// gate where the call has gates (token_permutation.h's row steps: the bits of the row-order
// combine and scatter-add over the stored rows). Items run one after the other in group
// order (one thread: grouped_bf16_sums_into_tokens), so each token's rows come in row order.
// Summed a row block at a time, not a C block: after each C block the AMX unit would wait
// for the sums of its 32 scattered token rows (measured slower than the separate pass).
void token_rows(const Problem<bf16>& p, const Operands<bf16>& o, int g, int i, int rows,
                const float* stage, size_t ld, int n0, int n1) {
  const size_t N = size_t(p.N());
  for (int r = 0; r < rows; ++r) {
    const int row = p.offset[g] + i + r;
    const float* v = p.out ? o.c + size_t(i + r) * o.ldc + n0 : stage + r * ld;
    float* t = p.tokens + size_t(p.token[row]) * N + n0;
    if (p.scale)
      add_scaled_row(t, v, p.scale[row], n1 - n0);
    else
      add_row(t, v, n1 - n0);
  }
}

void run_item(const Problem<bf16>& p, const Item& it, const Item& next, Scratch& s) {
  const Operands<bf16> o = operands(p, it.g);
  const int n0 = it.n0, n1 = it.n1;
  if (o.M == 0) return;
  if (o.K == 0) {  // an empty sum: C is zero, or unchanged when accumulating
    if (!o.accumulate)
      for (int i = 0; i < o.M; ++i) std::memset(o.c + i * o.ldc + n0, 0, size_t(n1 - n0) * 4);
    return;
  }
  const int kp = round_up(o.K, kStep), steps = kp / kStep;
  const int panels = (n1 - n0 + kTile - 1) / kTile;
  const size_t panel = size_t(kp / 2) * kTile;
  start_prefetch(p, next, int64_t((o.M + kBlock - 1) / kBlock) * ((panels + 1) / 2), s.prefetch);
  // A weight packed whole holds the item's columns as its panels from n0 / kTile on (an
  // item's n0 is a multiple of kTile), in the layout packed here.
  const uint32_t* b = nullptr;
  if (packed(p)) {
    b = packed_panels(p, it, panel);
  } else {
    s.b.resize(panel * panels);
    pack_pairs_bf16(s.b.data(), o.b, o.ldb, o.b_trans, o.K, kp / 2, n0, n1);
    b = s.b.data();
  }
  const bool in_place = !o.a_trans && o.K == kp;
  // A group split into column blocks is one item per block, mostly run one after the
  // other by one thread: its padded A (a whole transpose in backward_weight, megabytes for
  // a group of thousands of rows) is made once for all of them.
  if (!in_place && s.a_group != it.g) padded_a(o, kp, s.a), s.a_group = it.g;
  const bf16* a = in_place ? o.a : s.a.data();
  const size_t lda = in_place ? o.lda : size_t(kp);
  const size_t width = size_t(n1 - n0);
  std::vector<float>& stage = row_block_stage();
  if (p.tokens && !p.out) stage.resize(kBlock * width);
  for (int i = 0; i < o.M; i += kBlock) {
    const int rows = std::min(kBlock, o.M - i), tm = rows > kTile ? 2 : 1;
    const bf16* ai = a + i * lda;
    size_t ldai = lda;
    if (in_place && rows < tm * kTile) {  // tile loads would read past the group's rows
      s.a_rows.assign(size_t(tm) * kTile * kp, 0);
      for (int r = 0; r < rows; ++r)
        std::memcpy(s.a_rows.data() + size_t(r) * kp, ai + r * lda, size_t(kp) * sizeof(bf16));
      ai = s.a_rows.data(), ldai = kp;
    }
    for (int q = 0; q < panels; q += 2) {
      const int tn = q + 1 < panels ? 2 : 1, n = n0 + q * kTile;
      if (o.accumulate) prefetch_c(o, it, i, q + 2, panels);
      const bool staged = p.tokens && !p.out;  // rows summed into tokens, not kept
      run_block(tm, tn, staged ? stage.data() + q * kTile : o.c + i * o.ldc + n,
                staged ? width : o.ldc, rows, std::min(n1 - n, tn * kTile), ai, ldai, b + q * panel,
                panel, steps, o.accumulate, s.c.data(), s.prefetch.take(steps * kPrefetchPerStep));
    }
    if (p.tokens) token_rows(p, o, it.g, i, rows, stage.data(), width, n0, n1);
  }
}

// A 32-row block of an item's A from row i on, as tiles may read it: in place, or its rows
// copied to a zero-padded stage when tile loads would read past the group's rows.
const bf16* a_block(const Operands<bf16>& o, const bf16* a, size_t lda, bool in_place, int i,
                    int kp, Scratch& s, size_t& ldai) {
  const int rows = std::min(kBlock, o.M - i), tm = rows > kTile ? 2 : 1;
  const bf16* ai = a + i * lda;
  ldai = lda;
  if (!in_place || rows == tm * kTile) return ai;
  s.a_rows.assign(size_t(tm) * kTile * kp, 0);
  for (int r = 0; r < rows; ++r)
    std::memcpy(s.a_rows.data() + size_t(r) * kp, ai + r * lda, size_t(kp) * sizeof(bf16));
  ldai = kp;
  return s.a_rows.data();
}

// SwiGLU over a 32-row block of an item's units [n0, n1) once its GEMM results are all in:
// forward, from gu's two halves (just stored, in L1 or L2) into act; backward_input, from
// d_act in the stage (ld wide, never stored) and gu's rows into dgu's two halves. One row
// function call per row and item (swiglu.h), as wide as the item.
void swiglu_rows(const Problem<bf16>& p, const float* stage, size_t ld, int row, int rows, int n0,
                 int n1) {
  const size_t H = size_t(p.swiglu);
  for (int r = 0; r < rows; ++r) {
    const size_t at = size_t(row + r);
    const float* g = p.gu + at * 2 * H;
    if (p.product == Product::forward) {
      swiglu_forward_bf16_row(p.act + at * H + n0, g + n0, g + H + n0, n1 - n0);
    } else {
      bf16* d = p.dgu + at * 2 * H;
      swiglu_backward_bf16_row(d + n0, d + H + n0, g + n0, g + H + n0, stage + r * ld, n1 - n0);
    }
  }
}

// B for a fused item: forward, the gate panels of the item's units and, `up` words on, their
// up panels (H / 16 panels on in a whole pack); backward_input, the item's panels.
const uint32_t* swiglu_b(const Problem<bf16>& p, const Operands<bf16>& o, const Item& it, int kp,
                         Scratch& s, size_t& up) {
  const size_t panel = size_t(kp / 2) * kTile;
  const int panels = (it.n1 - it.n0) / kTile;
  const bool fwd = p.product == Product::forward;
  up = size_t(p.swiglu / kTile) * panel;
  if (packed(p)) return packed_panels(p, it, panel);
  s.b.resize(panel * panels * (fwd ? 2 : 1));
  pack_pairs_bf16(s.b.data(), o.b, o.ldb, o.b_trans, o.K, kp / 2, it.n0, it.n1);
  if (fwd) {
    pack_pairs_bf16(s.b.data() + panel * panels, o.b, o.ldb, o.b_trans, o.K, kp / 2,
                    p.swiglu + it.n0, p.swiglu + it.n1);
    up = panel * panels;
  }
  return s.b.data();
}

// run_item with SwiGLU applied to each 32-row block once its columns are computed (the same
// tiles over the whole K as run_item, so the same values; then swiglu.h's row functions:
// the composition's bits). Forward: the gate and the up columns of the item's units go to
// gu, then act is computed from them while they are in cache; backward_input: d_act goes to
// the stage, never to memory.
void run_item_swiglu(const Problem<bf16>& p, const Item& it, const Item& next, Scratch& s) {
  const Operands<bf16> o = operands(p, it.g);
  if (o.M == 0) return;
  const bool fwd = p.product == Product::forward;
  const int kp = round_up(o.K, kStep), steps = kp / kStep, panels = (it.n1 - it.n0) / kTile;
  const size_t panel = size_t(kp / 2) * kTile, width = size_t(it.n1 - it.n0);
  start_prefetch(p, next, int64_t((o.M + kBlock - 1) / kBlock) * ((panels + 1) / 2) * (fwd ? 2 : 1),
                 s.prefetch);
  size_t up = 0;
  const uint32_t* b = swiglu_b(p, o, it, kp, s, up);
  const bool in_place = !o.a_trans && o.K == kp;
  if (!in_place && s.a_group != it.g) padded_a(o, kp, s.a), s.a_group = it.g;
  const bf16* a = in_place ? o.a : s.a.data();
  const size_t lda = in_place ? o.lda : size_t(kp);
  std::vector<float>& stage = row_block_stage();
  if (!fwd) stage.resize(kBlock * width);
  for (int i = 0; i < o.M; i += kBlock) {
    const int rows = std::min(kBlock, o.M - i), tm = rows > kTile ? 2 : 1;
    size_t ldai = lda;
    const bf16* ai = a_block(o, a, lda, in_place, i, kp, s, ldai);
    for (int half = 0; half < (fwd ? 2 : 1); ++half) {
      float* c = fwd ? o.c + i * o.ldc + half * p.swiglu + it.n0 : stage.data();
      const size_t ldc = fwd ? o.ldc : width;
      for (int q = 0; q < panels; q += 2) {
        const int tn = q + 1 < panels ? 2 : 1;
        run_block(tm, tn, c + q * kTile, ldc, rows, std::min(int(width) - q * kTile, tn * kTile),
                  ai, ldai, b + half * up + q * panel, panel, steps, false, s.c.data(),
                  s.prefetch.take(steps * kPrefetchPerStep));
      }
    }
    swiglu_rows(p, stage.data(), width, p.offset[it.g] + i, rows, it.n0, it.n1);
  }
}

}  // namespace

void run_amx_swiglu(const Problem<bf16>& p) {
  const bool fwd = p.product == Product::forward;
  const Work w = split_work(p.offset, p.groups, p.swiglu, round_up(largest_k(p), kStep), kTile,
                            sizeof(bf16) * (fwd ? 2 : 1), kPackBudget, omp_get_max_threads());
  for_each_item(
      w,
      [] {
        configure_tiles();
        scratch().a_group = -1;
      },
      [&](const Item& it, const Item& next) { run_item_swiglu(p, it, next, scratch()); },
      [] { release_tiles(); });
}

void run_amx(const Problem<bf16>& p) {
  const int N = p.N();
  const Work w = split_work(p.offset, p.groups, N, round_up(largest_k(p), kStep), kTile,
                            sizeof(bf16), kPackBudget, omp_get_max_threads());
  for_each_item(
      w,
      [] {
        configure_tiles();
        scratch().a_group = -1;  // another call: other data, whatever the groups
      },
      [&](const Item& it, const Item& next) { run_item(p, it, next, scratch()); },
      [] { release_tiles(); });
}

}  // namespace mt::grouped

#else  // no AVX-512 in this build: no AMX path either

#include "core/error.h"

namespace mt::grouped {
void run_amx(const Problem<bf16>& p) {
  run_loop(p);
}
void run_amx_swiglu(const Problem<bf16>&) {
  MT_CHECK(false, "grouped GEMM with SwiGLU: no AMX in this build");
}
}  // namespace mt::grouped

#endif
