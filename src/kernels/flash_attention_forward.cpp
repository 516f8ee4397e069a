// Flash attention's forward driver (the algorithm is in flash_attention.h). Two phases:
//   1. pack: q (rotated) of every head, K (rotated) and V of every kv head, read row by row
//      and written into the products' layouts (q and K into FlashAttention::packed, when the
//      caller keeps them for the backward, else into the scratch);
//   2. tasks (kv head, query block, head of the group), heaviest query blocks first, each
//      owning its rows of out and lse: for every key block that is not fully masked, the
//      scores of the rows that see it, the online-softmax step and P V.
// Both run per sequence: its packed operands are still in L2 when the tasks read them, and
// the scratch holds one sequence.
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

struct ForwardLayout {
  int rf = 0, nkb = 0, nqc = 0;
  size_t qs = 0, kt = 0;  // one head's packed q rows; one kv head's key blocks
  size_t k = 0, v = 0;    // where K blocks and V reduction rows start (q at 0)
  size_t kept = 0;        // one sequence's q and K in FlashAttention::packed
  size_t workers = 0;     // then per worker: scores, output accumulator, m, l, c
  size_t s = 0, o = 0, worker = 0;
};

ForwardLayout forward_layout(const FlashAttention& a, const Tiles& t) {
  ForwardLayout L;
  L.rf = row_floats(t, a.hd);
  L.nkb = (a.Tk + kFlashKeyBlock - 1) / kFlashKeyBlock;
  L.nqc = (a.Tq + kFlashKeyBlock - 1) / kFlashKeyBlock;  // packing runs of query rows
  const PackedQK qk = packed_qk(a, t);
  L.qs = qk.q_head;
  L.kt = qk.k_head;
  L.kept = qk.sequence;
  L.k = size_t(a.H) * L.qs;
  L.v = L.k + size_t(a.Hkv) * L.kt;
  L.workers = L.v + size_t(a.Hkv) * L.kt;
  L.s = size_t(kFlashQueryBlock) * kFlashKeyBlock;
  L.o = round_up(size_t(kFlashQueryBlock) * a.hd, 16);
  L.worker = L.s + L.o + 3 * kFlashQueryBlock;
  return L;
}

// Sequence b's packed operands: q (every head) at q, K (every kv head) at k, V at v.
struct Packed {
  float *q, *k, *v;
};

Packed packed_at(float* scratch, const FlashAttention& a, const ForwardLayout& L, int b) {
  if (!a.packed) return {scratch, scratch + L.k, scratch + L.v};
  float* q = a.packed + size_t(b) * L.kept;
  return {q, q + L.k, scratch + L.v};
}

// Packing run c of sequence b: kFlashKeyBlock query rows (every head) or one key block
// (every kv head).
void pack_run(const Packed& P, const FlashAttention& a, const Tiles& t, const ForwardLayout& L,
              int b, int c) {
  if (c < L.nqc) {
    const int r0 = c * kFlashKeyBlock, n = std::min(kFlashKeyBlock, a.Tq - r0);
    t.pack_rows({P.q + size_t(r0) * L.rf, L.qs, a.q + (size_t(b) * a.Tq + r0) * a.ldq, a.ldq, n, n,
                 a.H, a.hd, a.qpos + r0, a.rope});
    return;
  }
  const int r0 = (c - L.nqc) * kFlashKeyBlock, n = std::min(kFlashKeyBlock, a.Tk - r0);
  const size_t at = size_t(r0) * L.rf, row = size_t(b) * a.Tk + r0;
  t.pack_key_blocks({P.k + at, L.kt, a.k + row * a.ldk, a.ldk, n, kFlashKeyBlock, a.Hkv, a.hd,
                     a.kpos + r0, a.rope});
  t.pack_reduction({P.v + at, L.kt, a.v + row * a.ldv, a.ldv, n, kFlashKeyBlock, a.Hkv, a.hd,
                    a.kpos + r0, nullptr});
}

// The bf16 output (--precision bf16, one worker: never a merge): the fp32 form's o / l, each
// rounded as to_bf16 rounds it, so no fp32 copy of the output is written and converted.
void finish_row(bf16* out, float* lse, const float* o, float m, float l, bool, int hd) {
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int d = 0; d < hd; d++) out[d] = float_to_bf16_select(o[d] * inv);
  *lse = l > 0.0f ? m + std::log(l) : -INFINITY;
}

// Writes (accumulate false) or merges (true) one row's o / l, lse m + log(l), into out, lse.
void finish_row(float* out, float* lse, const float* o, float m, float l, bool accumulate, int hd) {
  const float lse_new = l > 0.0f ? m + std::log(l) : -INFINITY;
  if (accumulate && lse_new == -INFINITY) return;  // no key seen here: the merge is a no-op
  if (!accumulate || *lse == -INFINITY) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < hd; d++) out[d] = o[d] * inv;
    *lse = lse_new;
    return;
  }
  // out = (e^lse_old out + e^lse_new o / l) / (e^lse_old + e^lse_new), shifted by the max.
  const float mx = std::fmax(*lse, lse_new);
  const float w_old = std::exp(*lse - mx), w_new = std::exp(lse_new - mx), sum = w_old + w_new;
  const float a = w_old / sum, b = w_new / (sum * l);
  for (int d = 0; d < hd; d++) out[d] = out[d] * a + o[d] * b;
  *lse = mx + std::log(sum);
}

struct ForwardTask {
  int b, h, qb;
};

template <class OutT>
void forward_task(const ForwardTask& task, OutT* out, size_t ldo, float* lse,
                  const FlashAttention& a, bool accumulate, const Packed& P, float* w,
                  const Tiles& t, const ForwardLayout& L) {
  const int hd = a.hd, i0 = task.qb * kFlashQueryBlock, g = task.h / (a.H / a.Hkv);
  const int rows = std::min(kFlashQueryBlock, a.Tq - i0);
  const int* qpos = a.qpos + i0;
  const float scale = 1.0f / std::sqrt(float(hd));
  const float* qt = P.q + size_t(task.h) * L.qs + size_t(i0) * L.rf;
  const size_t kv = size_t(g) * L.kt;
  float *s = w, *o = s + L.s, *m = o + L.o, *l = m + kFlashQueryBlock, *c = l + kFlashQueryBlock;
  const QueryRange qr = query_range(qpos, rows);
  // --dropout: l sums the undropped P (above); P V reads P * mask / (1 - p).
  const std::optional<DropoutMask> drop = dropout_mask(a.dropout);
  const int64_t feature_base = (a.dropout.head_offset + int64_t(task.h)) * a.dropout.seq_len;
  for (int r = 0; r < rows; r++) m[r] = -INFINITY, l[r] = 0.0f;
  std::memset(o, 0, sizeof(float) * size_t(rows) * hd);
  // Key blocks: skip the masked, mask the straddling (and only its rows that see a key), run
  // the visible plain.
  for (int kb = 0; kb < L.nkb; kb++) {
    const KeyBlock k = key_block(a.kpos, a.Tk, kb);
    const Visibility vis = visibility(k, qr);
    if (vis == Visibility::none) continue;
    const RowSpan span = rows_seeing(k, vis, qpos, rows);
    const int r0 = span.begin, n = span.end - span.begin;
    if (n <= 0) continue;
    const size_t off = kv + size_t(kb) * kFlashKeyBlock * L.rf;
    t.scores(s, qt + size_t(r0) * L.rf, n, P.k + off, scale, hd);
    for (int r = r0; r < span.end; r++) {
      float* row = s + (r - r0) * kFlashKeyBlock;
      softmax_step_row(row, vis == Visibility::full ? nullptr : k.pos, qpos[r], m[r], l[r], c[r]);
      if (drop)
        drop->scale_row(row, k.n, a.dropout.row_tokens[size_t(task.b) * a.Tq + i0 + r],
                        feature_base, k.pos);
      if (c[r] == 1.0f) continue;
#pragma omp simd
      for (int d = 0; d < hd; d++) o[size_t(r) * hd + d] *= c[r];
    }
    t.rows_by_keys(o + size_t(r0) * hd, hd, s, n, P.v + off, hd);
  }
  // Rows out: o / l, lse, merged when accumulating.
  for (int r = 0; r < rows; r++)
    finish_row(out + (size_t(task.b) * a.Tq + i0 + r) * ldo + size_t(task.h) * hd,
               lse + (size_t(task.b) * a.H + task.h) * a.Tq + i0 + r, o + size_t(r) * hd, m[r],
               l[r], accumulate, hd);
}

}  // namespace

size_t forward_scratch_floats(const FlashAttention& a, const Tiles& t, int workers) {
  const ForwardLayout L = forward_layout(a, t);
  return L.workers + size_t(workers) * L.worker;
}

namespace {

template <class OutT>
void forward_out(OutT* out, size_t ldo, float* lse, const FlashAttention& a, bool accumulate,
                 float* scratch, const Tiles& t) {
  const ForwardLayout L = forward_layout(a, t);
  const int G = a.H / a.Hkv, nqb = (a.Tq + kFlashQueryBlock - 1) / kFlashQueryBlock;
  for (int b = 0; b < a.B; b++) {
    const Packed P = packed_at(scratch, a, L, b);
#pragma omp parallel
    {
#pragma omp for schedule(static)
      for (int c = 0; c < L.nqc + L.nkb; c++) pack_run(P, a, t, L, b, c);
      // Tasks in flight together share a kv head (its K/V stay in cache); the last query
      // blocks, which see the most keys, start first so the dynamic schedule ends evenly.
      float* w = scratch + L.workers + size_t(omp_get_thread_num()) * L.worker;
      const TileScope tiles(t);
#pragma omp for schedule(dynamic)
      for (int i = 0; i < a.Hkv * nqb * G; i++) {
        const int hg = i % G, qb = nqb - 1 - i / G % nqb, g = i / G / nqb;
        forward_task({b, g * G + hg, qb}, out, ldo, lse, a, accumulate, P, w, t, L);
      }
    }
  }
}

}  // namespace

void forward(float* out, size_t ldo, float* lse, const FlashAttention& a, bool accumulate,
             float* scratch, const Tiles& t) {
  forward_out(out, ldo, lse, a, accumulate, scratch, t);
}

void forward(bf16* out, size_t ldo, float* lse, const FlashAttention& a, float* scratch,
             const Tiles& t) {
  forward_out(out, ldo, lse, a, false, scratch, t);
}

}  // namespace mt::flash
