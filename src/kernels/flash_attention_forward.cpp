// Flash attention's forward driver (the algorithm is in flash_attention.h). Two phases:
//   1. every (b, kv head)'s K (rotated) and V packed once into the products' layouts;
//   2. tasks (b, kv head, query block, head of the group), heaviest query blocks first, each
//      owning its rows of out and lse: its query tile packed (rotated), then for every key
//      block that is not fully masked the scores, the online-softmax step and P V.
#include <omp.h>

#include <cmath>
#include <cstring>

#include "kernels/flash_attention_blocks.h"
#include "kernels/flash_attention_tiles.h"
#include "kernels/vec_math.h"

namespace mt::flash {
namespace {

struct ForwardLayout {
  int rf = 0, nkb = 0;
  size_t kt = 0, kv = 0;       // per (b, kv head): key blocks, then V's reduction rows
  size_t q = 0, s = 0, o = 0;  // per worker: query tile, scores, output accumulator,
  size_t worker = 0;           // then m, l and the rescale factors (kFlashQueryBlock each)
};

ForwardLayout forward_layout(const FlashAttention& a, const Tiles& t) {
  ForwardLayout L;
  L.rf = row_floats(t, a.hd);
  L.nkb = (a.Tk + kFlashKeyBlock - 1) / kFlashKeyBlock;
  L.kt = round_up(size_t(L.nkb) * kFlashKeyBlock * L.rf, 16);
  L.kv = 2 * L.kt;
  L.q = round_up(size_t(kFlashQueryBlock) * L.rf, 16);
  L.s = size_t(kFlashQueryBlock) * kFlashKeyBlock;
  L.o = round_up(size_t(kFlashQueryBlock) * a.hd, 16);
  L.worker = L.q + L.s + L.o + 3 * kFlashQueryBlock;
  return L;
}

void pack_kv(float* kv, const FlashAttention& a, const Tiles& t, const ForwardLayout& L, int b,
             int g) {
  const size_t row0 = size_t(b) * a.Tk, col = size_t(g) * a.hd;
  t.pack_key_blocks(kv, a.k + row0 * a.ldk + col, a.ldk, a.Tk, a.kpos, a.rope, a.hd);
  t.pack_reduction(kv + L.kt, a.v + row0 * a.ldv + col, a.ldv, a.Tk, L.nkb * kFlashKeyBlock, a.kpos,
                   nullptr, a.hd);
}

// One row of the score tile: masked to its visible keys (kp null: all visible), replaced by
// exp(s - m_new) in place; m, l updated and c set to the factor exp(m_old - m_new) that
// rescales the row's accumulator.
void softmax_step_row(float* s, const int* kp, int qp, float& m, float& l, float& c) {
  float mx = -INFINITY;
  if (kp) {
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < kFlashKeyBlock; j++) {
      const float v = kp[j] <= qp ? s[j] : -INFINITY;
      mx = v > mx ? v : mx;
    }
  } else {
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < kFlashKeyBlock; j++) mx = s[j] > mx ? s[j] : mx;
  }
  if (mx == -INFINITY) {  // nothing visible in this block: P row 0, accumulator unchanged
    std::memset(s, 0, sizeof(float) * kFlashKeyBlock);
    c = 1.0f;
    return;
  }
  const float mnew = m > mx ? m : mx;
  c = m == -INFINITY ? 1.0f : exp_vec(m - mnew);  // l and the accumulator are 0 before a key
  float sum = 0.0f;
  if (kp) {
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < kFlashKeyBlock; j++) {
      const float p = kp[j] <= qp ? exp_vec(s[j] - mnew) : 0.0f;
      s[j] = p;
      sum += p;
    }
  } else {
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < kFlashKeyBlock; j++) {
      const float p = exp_vec(s[j] - mnew);
      s[j] = p;
      sum += p;
    }
  }
  l = l * c + sum;
  m = mnew;
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

void forward_task(const ForwardTask& task, float* out, size_t ldo, float* lse,
                  const FlashAttention& a, bool accumulate, const float* kv, float* w,
                  const Tiles& t, const ForwardLayout& L) {
  const int hd = a.hd, i0 = task.qb * kFlashQueryBlock;
  const int rows = a.Tq - i0 < kFlashQueryBlock ? a.Tq - i0 : kFlashQueryBlock;
  const int* qpos = a.qpos + i0;
  const float scale = 1.0f / std::sqrt(float(hd));
  float *qt = w, *s = w + L.q, *o = s + L.s, *m = o + L.o, *l = m + kFlashQueryBlock,
        *c = l + kFlashQueryBlock;
  // Set-up: the query tile rotated to its positions; empty running statistics.
  t.pack_rows(qt, a.q + (size_t(task.b) * a.Tq + i0) * a.ldq + size_t(task.h) * hd, a.ldq, rows,
              qpos, a.rope, hd);
  const QueryRange qr = query_range(qpos, rows);
  for (int r = 0; r < rows; r++) m[r] = -INFINITY, l[r] = 0.0f;
  std::memset(o, 0, sizeof(float) * size_t(rows) * hd);
  // Key blocks: skip the masked, mask the straddling, run the visible plain.
  for (int kb = 0; kb < L.nkb; kb++) {
    const KeyBlock k = key_block(a.kpos, a.Tk, kb);
    const Visibility vis = visibility(k, qr);
    if (vis == Visibility::none) continue;
    const size_t off = size_t(kb) * kFlashKeyBlock * L.rf;
    t.scores(s, qt, rows, kv + off, scale, hd);
    for (int r = 0; r < rows; r++) {
      softmax_step_row(s + r * kFlashKeyBlock, vis == Visibility::full ? nullptr : k.pos, qpos[r],
                       m[r], l[r], c[r]);
      if (c[r] == 1.0f) continue;
#pragma omp simd
      for (int d = 0; d < hd; d++) o[size_t(r) * hd + d] *= c[r];
    }
    t.rows_by_keys(o, hd, s, rows, kv + L.kt + off, hd);
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
  return size_t(a.B) * a.Hkv * L.kv + size_t(workers) * L.worker;
}

void forward(float* out, size_t ldo, float* lse, const FlashAttention& a, bool accumulate,
             float* scratch, const Tiles& t) {
  const ForwardLayout L = forward_layout(a, t);
  const int G = a.H / a.Hkv, nqb = (a.Tq + kFlashQueryBlock - 1) / kFlashQueryBlock;
  float* workers = scratch + size_t(a.B) * a.Hkv * L.kv;
#pragma omp parallel for schedule(static)
  for (int bg = 0; bg < a.B * a.Hkv; bg++)
    pack_kv(scratch + size_t(bg) * L.kv, a, t, L, bg / a.Hkv, bg % a.Hkv);
  // Tasks in flight together share a kv head (its K/V stay in cache); the last query blocks,
  // which see the most keys, start first so the dynamic schedule ends evenly.
  const long ntasks = long(a.B) * a.Hkv * nqb * G;
#pragma omp parallel for schedule(dynamic)
  for (long i = 0; i < ntasks; i++) {
    const int hg = int(i % G), qb = nqb - 1 - int(i / G % nqb);
    const int g = int(i / G / nqb % a.Hkv), b = int(i / G / nqb / a.Hkv);
    forward_task({b, g * G + hg, qb}, out, ldo, lse, a, accumulate,
                 scratch + (size_t(b) * a.Hkv + g) * L.kv,
                 workers + size_t(omp_get_thread_num()) * L.worker, t, L);
  }
}

}  // namespace mt::flash
