// Flash attention's backward driver (FlashAttention-2's algorithm, flash_attention.h). Phases:
//   1. pack: per (b, query head) q (rotated) and dout; per (b, kv head) k (rotated) and v, in
//      the layouts of the products that read them; zero the dq partials;
//   2. tasks (b, kv head, chunk c of C): the chunk's key blocks (c, c + C, ...) taken
//      kKeyPanel at a time, their dK and dV accumulated in the task's tiles over every query
//      head of the group and every query block that sees them, then un-rotated and added to
//      dk, dv (rows this task alone owns). Per visit: S and dP recomputed, P = exp(S - lse),
//      dS = scale P (dP - D); dV += P^T dout, dK += dS^T q, dq partial c += dS k;
//   3. dq += the C partials summed in a fixed order, un-rotated.
// C depends on the shape only (enough tasks for two threads when B * Hkv is small), so the
// bits do not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

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
  size_t qside = 0;   // per (b, h): q rows, dout rows [, q and dout reduction]
  size_t blocks = 0;  // one packed operand of the key blocks
  size_t kside = 0;   // per (b, g): k blocks, v blocks, k reduction
  size_t q_total = 0, k_total = 0, dq_total = 0;
  size_t tile = 0, panel = 0, worker = 0;  // per worker: dK, dV panels, S, dP tiles
};

BackwardLayout backward_layout(const FlashAttention& a, const Tiles& t) {
  BackwardLayout L;
  L.rf = row_floats(t, a.hd);
  L.nkb = (a.Tk + kFlashKeyBlock - 1) / kFlashKeyBlock;
  L.nqb = (a.Tq + kFlashQueryBlock - 1) / kFlashQueryBlock;
  const int kv_heads = a.B * a.Hkv;
  L.chunks = (kBackwardTasks + kv_heads - 1) / kv_heads;
  L.chunks = L.chunks > L.nkb ? L.nkb : L.chunks;
  L.chunks = L.chunks < 1 ? 1 : L.chunks;
  L.Tqp = int(round_up(a.Tq, 2));
  L.rows = round_up(size_t(L.Tqp) * L.rf, 16);
  L.qside = (t.reduction_is_rows ? 2 : 4) * L.rows;
  L.blocks = round_up(size_t(L.nkb) * kFlashKeyBlock * L.rf, 16);
  L.kside = 3 * L.blocks;
  L.q_total = size_t(a.B) * a.H * L.qside;
  L.k_total = size_t(kv_heads) * L.kside;
  L.dq_total = size_t(L.chunks) * a.B * a.H * a.Tq * a.hd;
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

QuerySide query_side(const float* base, const BackwardLayout& L, bool reduction_is_rows) {
  if (reduction_is_rows) return {base, base + L.rows, base, base + L.rows};
  return {base, base + L.rows, base + 2 * L.rows, base + 3 * L.rows};
}

// Packing run i of sequence b: kFlashKeyBlock query rows of every head (q, dout) or one key
// block of every kv head (k, v).
void pack_run(float* qside, float* kside, const FlashAttention& a, const float* dout, size_t lddo,
              const Tiles& t, const BackwardLayout& L, int i) {
  const int nqc = (a.Tq + kFlashKeyBlock - 1) / kFlashKeyBlock, b = i / (nqc + L.nkb);
  const int c = i % (nqc + L.nkb);
  if (c < nqc) {
    const int r0 = c * kFlashKeyBlock, n = std::min(kFlashKeyBlock, a.Tq - r0);
    const int padded = c == nqc - 1 ? L.Tqp - r0 : n;
    const size_t row = size_t(b) * a.Tq + r0;
    float* dst = qside + size_t(b) * a.H * L.qside + size_t(r0) * L.rf;
    const PackRows q{dst, L.qside, a.q + row * a.ldq, a.ldq, n, padded,
                     a.H, a.hd,    a.qpos + r0,       a.rope};
    const PackRows dy{dst + L.rows, L.qside, dout + row * lddo, lddo,   n, padded,
                      a.H,          a.hd,    a.qpos + r0,       nullptr};
    t.pack_rows(q);
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
  float* dst = kside + size_t(b) * a.Hkv * L.kside + size_t(r0) * L.rf;
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
  const float* qside;  // the (b, 0) query side; head h at + h * L.qside
  KeySide keys;
  const float *lse, *D;  // (B, H, Tq)
  float* dq;             // this chunk's partial, (B, H, Tq, hd)
  float* w;              // this worker's tiles
};

// Every query head of the group and query block that sees the panel's key blocks.
void backward_panel(const BackwardTask& T, const int* blocks, const KeyBlock* keys, int np) {
  const FlashAttention& a = T.a;
  const int hd = a.hd, G = a.H / a.Hkv;
  const float scale = 1.0f / std::sqrt(float(hd));
  float *dK = T.w, *dV = dK + T.L.panel, *S = dV + T.L.panel, *dP = S + T.L.tile;
  for (int h = T.g * G; h < (T.g + 1) * G; h++) {
    const QuerySide qs = query_side(T.qside + size_t(h) * T.L.qside, T.L, T.t.reduction_is_rows);
    const size_t bh = (size_t(T.b) * a.H + h) * a.Tq;
    for (int qb = 0; qb < T.L.nqb; qb++) {
      const int i0 = qb * kFlashQueryBlock;
      const int rows = a.Tq - i0 < kFlashQueryBlock ? a.Tq - i0 : kFlashQueryBlock;
      const QueryRange qr = query_range(a.qpos + i0, rows);
      const size_t qoff = size_t(i0) * T.L.rf;
      for (int p = 0; p < np; p++) {
        if (visibility(keys[p], qr) == Visibility::none) continue;
        const size_t koff = size_t(blocks[p]) * kFlashKeyBlock * T.L.rf;
        T.t.scores(S, qs.q + qoff, rows, T.keys.k + koff, scale, hd);
        T.t.scores(dP, qs.dout + qoff, rows, T.keys.v + koff, 1.0f, hd);
        for (int r = 0; r < rows; r++)
          probs_row(S + r * kFlashKeyBlock, dP + r * kFlashKeyBlock, keys[p].pos, a.qpos[i0 + r],
                    T.lse[bh + i0 + r], T.D[bh + i0 + r], scale);
        const size_t tile = size_t(p) * kFlashKeyBlock * hd;
        T.t.keys_by_rows(dV + tile, S, rows, qs.dout_red + qoff, hd);
        T.t.keys_by_rows(dK + tile, dP, rows, qs.q_red + qoff, hd);
        T.t.rows_by_keys(T.dq + (bh + i0) * hd, hd, dP, rows, T.keys.k_red + koff, hd);
      }
    }
  }
}

// dk (un-rotated), dv += the panel's tiles.
void flush_panel(const BackwardTask& T, const FlashGrads& g, const int* blocks,
                 const KeyBlock* keys, int np) {
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
      float *dk = g.dk + row * g.lddk + size_t(T.g) * hd,
            *dv = g.dv + row * g.lddv + size_t(T.g) * hd;
#pragma omp simd
      for (int d = 0; d < hd; d++) dk[d] += dkr[d];
#pragma omp simd
      for (int d = 0; d < hd; d++) dv[d] += dvr[d];
    }
}

void backward_task(const BackwardTask& T, const FlashGrads& g) {
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
void finish_dq_row(const FlashGrads& g, const float* partials, const FlashAttention& a,
                   const BackwardLayout& L, int b, int t) {
  const int hd = a.hd;
  const size_t chunk = size_t(a.B) * a.H * a.Tq * hd;
  float row[kFlashMaxHeadDim];
  for (int h = 0; h < a.H; h++) {
    const float* p = partials + ((size_t(b) * a.H + h) * a.Tq + t) * hd;
    std::memcpy(row, p, sizeof(float) * hd);
    for (int c = 1; c < L.chunks; c++)
      for (int d = 0; d < hd; d++) row[d] += p[c * chunk + d];
    if (a.rope) rope_unrotate(row, a.rope->cos(a.qpos[t]), a.rope->sin(a.qpos[t]), hd / 2);
    float* dq = g.dq + (size_t(b) * a.Tq + t) * g.lddq + size_t(h) * hd;
#pragma omp simd
    for (int d = 0; d < hd; d++) dq[d] += row[d];
  }
}

}  // namespace

size_t backward_scratch_floats(const FlashAttention& a, const Tiles& t, int workers) {
  const BackwardLayout L = backward_layout(a, t);
  return L.q_total + L.k_total + L.dq_total + size_t(workers) * L.worker;
}

void backward(const FlashGrads& g, const float* dout, size_t lddo, const float* lse, const float* D,
              const FlashAttention& a, float* scratch, const Tiles& t) {
  const BackwardLayout L = backward_layout(a, t);
  float *qside = scratch, *kside = qside + L.q_total, *dq = kside + L.k_total;
  float* workers = dq + L.dq_total;
  // Phase 1: packing, and the dq partials zeroed.
  const int runs = a.B * ((a.Tq + kFlashKeyBlock - 1) / kFlashKeyBlock + L.nkb);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < runs; i++) pack_run(qside, kside, a, dout, lddo, t, L, i);
  std::memset(dq, 0, sizeof(float) * L.dq_total);
  // Phase 2: tasks (b, kv head, chunk).
  const size_t chunk = size_t(a.B) * a.H * a.Tq * a.hd;
  const int ntasks = a.B * a.Hkv * L.chunks;
#pragma omp parallel for schedule(dynamic)
  for (int i = 0; i < ntasks; i++) {
    const int c = i % L.chunks, bg = i / L.chunks, b = bg / a.Hkv, kvh = bg % a.Hkv;
    const float* ks = kside + size_t(bg) * L.kside;
    const BackwardTask task{b,
                            kvh,
                            c,
                            a,
                            t,
                            L,
                            qside + size_t(b) * a.H * L.qside,
                            {ks, ks + L.blocks, ks + 2 * L.blocks},
                            lse,
                            D,
                            dq + c * chunk,
                            workers + size_t(omp_get_thread_num()) * L.worker};
    backward_task(task, g);
  }
  // Phase 3: dq.
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < a.B * a.Tq; bt++) finish_dq_row(g, dq, a, L, bt / a.Tq, bt % a.Tq);
}

}  // namespace mt::flash
