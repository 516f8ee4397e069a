// Flash attention's backward driver (FlashAttention-2's algorithm, flash_attention.h). Per
// sequence b (its packed operands stay in L2), three phases:
//   1. pack: per query head q (rotated) and dout, per kv head k (rotated) and v, in the
//      layouts of the products that read them; zero the dq partials. q's rows and k's key
//      blocks come from FlashAttention::packed when the forward kept them there (the same
//      packers on the same operands: the same bits), and are not packed again;
//   2. tasks (kv head, chunk c of C): the chunk's key blocks (c, c + C, ...) taken kKeyPanel
//      at a time, their dK and dV accumulated in the task's tiles over every query head of
//      the group and every query block that sees them, then un-rotated and added to dk, dv
//      (rows this task alone owns). Per visit, on the query rows that see the block: S and dP
//      recomputed, P = exp(S - lse), dS = scale P (dP - D); dV += P^T dout, dK += dS^T q,
//      dq partial c += dS k;
//   3. dq += the C partials summed in a fixed order, un-rotated.
// C depends on the shape only (enough tasks for two threads when Hkv is small), so the bits
// do not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "kernels/flash_attention_blocks.h"
#include "kernels/flash_attention_rows.h"
#include "kernels/flash_attention_tiles.h"

namespace mt::flash {
namespace {

constexpr int kKeyPanel = 8;       // key blocks whose dK, dV tiles a task keeps at once
constexpr int kBackwardTasks = 4;  // fewest tasks wanted; below it a kv head's keys split

struct BackwardLayout {
  int rf = 0, nkb = 0, nqb = 0, chunks = 1, Tqp = 0;
  size_t rows = 0;    // one packed operand of Tqp query rows
  size_t qside = 0;   // per query head: q rows, dout rows [, q and dout reduction]
  size_t blocks = 0;  // one packed operand of the key blocks
  size_t kside = 0;   // per kv head: k blocks, v blocks, k reduction
  size_t q_total = 0, k_total = 0, dq_chunk = 0, dq_total = 0;  // of one sequence
  size_t tile = 0, panel = 0, worker = 0;  // per worker: dK, dV panels, S, dP tiles
};

BackwardLayout backward_layout(const FlashAttention& a, const Tiles& t) {
  BackwardLayout L;
  L.rf = row_floats(t, a.hd);
  L.nkb = (a.Tk + kFlashKeyBlock - 1) / kFlashKeyBlock;
  L.nqb = (a.Tq + kFlashQueryBlock - 1) / kFlashQueryBlock;
  L.chunks = (kBackwardTasks + a.Hkv - 1) / a.Hkv;
  L.chunks = L.chunks > L.nkb ? L.nkb : L.chunks;
  L.chunks = L.chunks < 1 ? 1 : L.chunks;
  L.Tqp = int(round_up(a.Tq, 2));
  L.rows = round_up(size_t(L.Tqp) * L.rf, 16);
  L.qside = (t.reduction_is_rows ? 2 : 4) * L.rows;
  L.blocks = round_up(size_t(L.nkb) * kFlashKeyBlock * L.rf, 16);
  L.kside = 3 * L.blocks;
  L.q_total = size_t(a.H) * L.qside;
  L.k_total = size_t(a.Hkv) * L.kside;
  L.dq_chunk = size_t(a.H) * a.Tq * a.hd;
  L.dq_total = L.chunks * L.dq_chunk;
  L.tile = size_t(kFlashQueryBlock) * kFlashKeyBlock;
  L.panel = size_t(kKeyPanel) * kFlashKeyBlock * a.hd;
  L.worker = 2 * L.panel + 2 * L.tile;
  return L;
}

// Where one (b, query head)'s and one (b, kv head)'s packed operands are.
struct QuerySide {
  const float *q, *dout, *q_red, *dout_red;
};
struct KeySide {
  const float *k, *v, *k_red;
};

// base: the head's slots of the query side; kept: its q rows kept by the forward, or null.
QuerySide query_side(const float* base, const float* kept, const BackwardLayout& L,
                     bool reduction_is_rows) {
  const float* q = kept ? kept : base;
  if (reduction_is_rows) return {q, base + L.rows, q, base + L.rows};
  return {q, base + L.rows, base + 2 * L.rows, base + 3 * L.rows};
}

// Packing run c of sequence b: kFlashKeyBlock query rows of every head (q, dout) or one key
// block of every kv head (k, v); q's rows and k's key blocks only when the forward did not
// keep them (a.packed).
void pack_run(float* qside, float* kside, const FlashAttention& a, const float* dout, size_t lddo,
              const Tiles& t, const BackwardLayout& L, int b, int c) {
  const int nqc = (a.Tq + kFlashKeyBlock - 1) / kFlashKeyBlock;
  if (c < nqc) {
    const int r0 = c * kFlashKeyBlock, n = std::min(kFlashKeyBlock, a.Tq - r0);
    const int padded = c == nqc - 1 ? L.Tqp - r0 : n;
    const size_t row = size_t(b) * a.Tq + r0;
    float* dst = qside + size_t(r0) * L.rf;
    const PackRows q{dst, L.qside, a.q + row * a.ldq, a.ldq, n, padded,
                     a.H, a.hd,    a.qpos + r0,       a.rope};
    const PackRows dy{dst + L.rows, L.qside, dout + row * lddo, lddo,   n, padded,
                      a.H,          a.hd,    a.qpos + r0,       nullptr};
    if (!a.packed) t.pack_rows(q);
    t.pack_rows(dy);
    if (t.reduction_is_rows) return;
    t.pack_reduction(
        {q.dst + 2 * L.rows, q.head_stride, q.src, q.ld, n, padded, a.H, a.hd, q.pos, q.rope});
    t.pack_reduction({dy.dst + 2 * L.rows, dy.head_stride, dy.src, dy.ld, n, padded, a.H, a.hd,
                      dy.pos, nullptr});
    return;
  }
  const int r0 = (c - nqc) * kFlashKeyBlock, n = std::min(kFlashKeyBlock, a.Tk - r0);
  const size_t row = size_t(b) * a.Tk + r0;
  float* dst = kside + size_t(r0) * L.rf;
  if (!a.packed)
    t.pack_key_blocks({dst, L.kside, a.k + row * a.ldk, a.ldk, n, kFlashKeyBlock, a.Hkv, a.hd,
                       a.kpos + r0, a.rope});
  t.pack_key_blocks({dst + L.blocks, L.kside, a.v + row * a.ldv, a.ldv, n, kFlashKeyBlock, a.Hkv,
                     a.hd, a.kpos + r0, nullptr});
  t.pack_reduction({dst + 2 * L.blocks, L.kside, a.k + row * a.ldk, a.ldk, n, kFlashKeyBlock, a.Hkv,
                    a.hd, a.kpos + r0, a.rope});
}

// One task's view of the call: its (b, kv head), chunk, and the pointers derived from them.
struct BackwardTask {
  int b, g, chunk;
  const FlashAttention& a;
  const Tiles& t;
  const BackwardLayout& L;
  const float* qside;  // sequence b's query side; head h at + h * L.qside
  const float* kept;   // sequence b's kept q rows (head h at + h * q_head), or null
  size_t q_head;
  KeySide keys;
  const float *lse, *D;  // (B, H, Tq)
  float* dq;             // this chunk's partial, (H, Tq, hd)
  float* w;              // this worker's tiles
};

// Rows [rows.begin, rows.end) of the tile: S = P, dP = dS (probs_row). --dropout: the dP of
// the undropped P is m times that of the dropped one, and dV reads P m.
void probs_tile(const BackwardTask& T, float* S, float* dP, RowSpan rows, const KeyBlock& k,
                size_t bh, const DropoutMask* drop, int64_t feature_base) {
  const FlashAttention& a = T.a;
  const float scale = 1.0f / std::sqrt(float(a.hd));
  for (int i = rows.begin; i < rows.end; i++) {
    float *s = S + (i - rows.begin) * kFlashKeyBlock, *dp = dP + (i - rows.begin) * kFlashKeyBlock;
    float f[kFlashKeyBlock];
    if (drop) {
      std::fill(f, f + kFlashKeyBlock, 1.0f);
      drop->scale_row(f, k.n, a.dropout.row_tokens[size_t(T.b) * a.Tq + i], feature_base, k.pos);
      for (int j = 0; j < kFlashKeyBlock; j++) dp[j] *= f[j];
    }
    probs_row(s, dp, k.pos, a.qpos[i], T.lse[bh + i], T.D[bh + i], scale);
    if (drop)
      for (int j = 0; j < kFlashKeyBlock; j++) s[j] *= f[j];
  }
}

// Every query head of the group and query block that sees the panel's key blocks.
void backward_panel(const BackwardTask& T, const int* blocks, const KeyBlock* keys, int np) {
  const FlashAttention& a = T.a;
  const int hd = a.hd, G = a.H / a.Hkv;
  const float scale = 1.0f / std::sqrt(float(hd));
  float *dK = T.w, *dV = dK + T.L.panel, *S = dV + T.L.panel, *dP = S + T.L.tile;
  const std::optional<DropoutMask> drop = dropout_mask(a.dropout);
  for (int h = T.g * G; h < (T.g + 1) * G; h++) {
    const int64_t feature_base = (a.dropout.head_offset + int64_t(h)) * a.dropout.seq_len;
    const QuerySide qs =
        query_side(T.qside + size_t(h) * T.L.qside,
                   T.kept ? T.kept + size_t(h) * T.q_head : nullptr, T.L, T.t.reduction_is_rows);
    const size_t bh = (size_t(T.b) * a.H + h) * a.Tq;
    float* dq = T.dq + size_t(h) * a.Tq * hd;
    for (int qb = 0; qb < T.L.nqb; qb++) {
      const int i0 = qb * kFlashQueryBlock, rows = std::min(kFlashQueryBlock, a.Tq - i0);
      const QueryRange qr = query_range(a.qpos + i0, rows);
      for (int p = 0; p < np; p++) {
        const Visibility vis = visibility(keys[p], qr);
        if (vis == Visibility::none) continue;
        // The rows that see the block, from an even row (bf16 pairs query rows from there).
        const RowSpan span = rows_seeing(keys[p], vis, a.qpos + i0, rows);
        const int r0 = i0 + (span.begin & ~1), n = i0 + span.end - r0;
        if (n <= 0) continue;
        const size_t qoff = size_t(r0) * T.L.rf, koff = size_t(blocks[p]) * kFlashKeyBlock * T.L.rf;
        T.t.scores(S, qs.q + qoff, n, T.keys.k + koff, scale, hd);
        T.t.scores(dP, qs.dout + qoff, n, T.keys.v + koff, 1.0f, hd);
        probs_tile(T, S, dP, {r0, r0 + n}, keys[p], bh, drop ? &*drop : nullptr, feature_base);
        const size_t tile = size_t(p) * kFlashKeyBlock * hd;
        T.t.keys_by_rows(dV + tile, S, n, qs.dout_red + qoff, hd);
        T.t.keys_by_rows(dK + tile, dP, n, qs.q_red + qoff, hd);
        T.t.rows_by_keys(dq + size_t(r0) * hd, hd, dP, n, T.keys.k_red + koff, hd);
      }
    }
  }
}

// A finished gradient row x into its place: added (fp32 grads), stored as 0 + x (fp32 grads
// with overwrite: the sum onto a zeroed row, -0 becoming +0 there too, without the memset),
// or (bf16 grads, which the call overwrites) rounded as to_bf16 rounds 0 + x, so no fp32 copy
// of dqkv is zeroed, summed and converted.
void put_row(const FlashGrads& g, float* dst, const float* x, int hd) {
  if (g.overwrite) {
#pragma omp simd
    for (int d = 0; d < hd; d++) dst[d] = 0.0f + x[d];
    return;
  }
#pragma omp simd
  for (int d = 0; d < hd; d++) dst[d] += x[d];
}
void put_row(const FlashGradsBf16&, bf16* dst, const float* x, int hd) {
  for (int d = 0; d < hd; d++) dst[d] = float_to_bf16_select(0.0f + x[d]);
}

// dk (un-rotated), dv += the panel's tiles.
template <class Grads>
void flush_panel(const BackwardTask& T, const Grads& g, const int* blocks, const KeyBlock* keys,
                 int np) {
  const FlashAttention& a = T.a;
  const int hd = a.hd;
  float *dK = T.w, *dV = dK + T.L.panel;
  for (int p = 0; p < np; p++)
    for (int j = 0; j < keys[p].n; j++) {
      const size_t row = size_t(T.b) * a.Tk + size_t(blocks[p]) * kFlashKeyBlock + j;
      float* dkr = dK + (size_t(p) * kFlashKeyBlock + j) * hd;
      const float* dvr = dV + (size_t(p) * kFlashKeyBlock + j) * hd;
      if (a.rope)
        rope_unrotate(dkr, a.rope->cos(keys[p].pos[j]), a.rope->sin(keys[p].pos[j]), hd / 2);
      put_row(g, g.dk + row * g.lddk + size_t(T.g) * hd, dkr, hd);
      put_row(g, g.dv + row * g.lddv + size_t(T.g) * hd, dvr, hd);
    }
}

template <class Grads>
void backward_task(const BackwardTask& T, const Grads& g) {
  const int C = T.L.chunks, nkb = T.L.nkb;
  int blocks[kKeyPanel];
  KeyBlock keys[kKeyPanel];
  for (int first = T.chunk; first < nkb; first += kKeyPanel * C) {
    int np = 0;
    for (int kb = first; kb < nkb && np < kKeyPanel; kb += C, np++) {
      blocks[np] = kb;
      keys[np] = key_block(T.a.kpos, T.a.Tk, kb);
    }
    std::memset(T.w, 0, sizeof(float) * 2 * T.L.panel);
    backward_panel(T, blocks, keys, np);
    flush_panel(T, g, blocks, keys, np);
  }
}

// dq row (b, t) += the chunks' partials summed in order, un-rotated.
template <class Grads>
void finish_dq_row(const Grads& g, const float* partials, const FlashAttention& a,
                   const BackwardLayout& L, int b, int t) {
  const int hd = a.hd;
  float row[kFlashMaxHeadDim];
  for (int h = 0; h < a.H; h++) {
    const float* p = partials + (size_t(h) * a.Tq + t) * hd;
    std::memcpy(row, p, sizeof(float) * hd);
    for (int c = 1; c < L.chunks; c++)
      for (int d = 0; d < hd; d++) row[d] += p[c * L.dq_chunk + d];
    if (a.rope) rope_unrotate(row, a.rope->cos(a.qpos[t]), a.rope->sin(a.qpos[t]), hd / 2);
    put_row(g, g.dq + (size_t(b) * a.Tq + t) * g.lddq + size_t(h) * hd, row, hd);
  }
}

}  // namespace

size_t backward_scratch_floats(const FlashAttention& a, const Tiles& t, int workers) {
  const BackwardLayout L = backward_layout(a, t);
  return L.q_total + L.k_total + L.dq_total + size_t(workers) * L.worker;
}

namespace {

template <class Grads>
void backward_grads(const Grads& g, const float* dout, size_t lddo, const float* lse,
                    const float* D, const FlashAttention& a, float* scratch, const Tiles& t) {
  const BackwardLayout L = backward_layout(a, t);
  float *qside = scratch, *kside = qside + L.q_total, *dq = kside + L.k_total;
  float* workers = dq + L.dq_total;
  const int runs = (a.Tq + kFlashKeyBlock - 1) / kFlashKeyBlock + L.nkb;
  const PackedQK qk = packed_qk(a, t);
  for (int b = 0; b < a.B; b++) {
    const float* kept = a.packed ? a.packed + b * qk.sequence : nullptr;
#pragma omp parallel
    {
      // Phase 1: packing, and the dq partials zeroed.
#pragma omp for schedule(static)
      for (int c = 0; c < runs; c++) pack_run(qside, kside, a, dout, lddo, t, L, b, c);
#pragma omp for schedule(static)
      for (int c = 0; c < L.chunks * a.H; c++)
        std::memset(dq + size_t(c) * a.Tq * a.hd, 0, sizeof(float) * a.Tq * a.hd);
      // Phase 2: tasks (kv head, chunk).
      float* w = workers + size_t(omp_get_thread_num()) * L.worker;
      const TileScope tiles(t);
#pragma omp for schedule(dynamic)
      for (int i = 0; i < a.Hkv * L.chunks; i++) {
        const int c = i % L.chunks, kvh = i / L.chunks;
        const float* ks = kside + size_t(kvh) * L.kside;
        const float* k = kept ? kept + a.H * qk.q_head + kvh * qk.k_head : ks;
        const BackwardTask task{b,
                                kvh,
                                c,
                                a,
                                t,
                                L,
                                qside,
                                kept,
                                qk.q_head,
                                {k, ks + L.blocks, ks + 2 * L.blocks},
                                lse,
                                D,
                                dq + c * L.dq_chunk,
                                w};
        backward_task(task, g);
      }
      // Phase 3: dq.
#pragma omp for schedule(static)
      for (int i = 0; i < a.Tq; i++) finish_dq_row(g, dq, a, L, b, i);
    }
  }
}

}  // namespace

void backward(const FlashGrads& g, const float* dout, size_t lddo, const float* lse, const float* D,
              const FlashAttention& a, float* scratch, const Tiles& t) {
  backward_grads(g, dout, lddo, lse, D, a, scratch, t);
}

void backward(const FlashGradsBf16& g, const float* dout, size_t lddo, const float* lse,
              const float* D, const FlashAttention& a, float* scratch, const Tiles& t) {
  backward_grads(g, dout, lddo, lse, D, a, scratch, t);
}

}  // namespace mt::flash
