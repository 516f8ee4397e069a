#include "kernels/attention.h"
#include "kernels/phase_profile.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "kernels/attention_amx.h"
#include "kernels/attention_avx512.h"
#include "kernels/attention_bf16_avx512.h"
#include "kernels/attention_bf16_batched.h"
#include "kernels/matmul.h"
#include "kernels/vec_math.h"

namespace mt {

// Every (batch, head) pair is independent: OpenMP splits the pairs and each pair runs
// single-threaded. Head dims 16/32/64/128 on AVX-512 builds use the register-blocked
// kernels of attention_avx512.cpp (causal blocks skipped); any other head dim takes the
// sgemm path below. Both store the probabilities above the diagonal as exact zeros, which
// keeps the (B, NH, T, T) buffer valid for anyone reading it whole.
//
// sgemm path, causal skipping: the T query rows are cut into blocks of kRowBlock; block
// [i0, i1) only needs keys 0 .. i1-1. Measured at T = 128, hd = 64, dnnl_sgemm's per-call
// cost on such small GEMMs outweighs the saved FLOPs (32-row blocks took 1.7x longer than
// one 128-row block), so the block is 128 and the skipping pays only for longer sequences.
namespace {

constexpr int kRowBlock = 128;

// Where one (batch, head) pair's slices start: `row` in the (B, T, C) tensors (out, dout);
// q, k, v in the (B, T, 3C) ones (qkv, dqkv), where head h reads its own K/V columns; `att`
// in the (B, NH, T, T) ones (probabilities, scratch); `stats` in the (B, NH, T, 2) row
// statistics; bh the pair's index (b NH + h). The one place that maps a query head to the K/V
// rows it reads.
struct HeadOffsets {
  size_t row, q, k, v, att, stats, bh;
};

HeadOffsets head_offsets(int b, int h, int T, int C, int NH, int hd) {
  const size_t qkv_row = static_cast<size_t>(b) * T * 3 * C + static_cast<size_t>(h) * hd;
  const size_t bh = static_cast<size_t>(b) * NH + h;
  return {static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hd,
          qkv_row,
          qkv_row + C,
          qkv_row + 2 * C,
          bh * T * T,
          bh * T * 2,
          bh};
}

// Floats of one head's slice of `att` in the row_stats_packed form: its (T, 2) statistics,
// then the forward's packing of q and k (32-bit words, one float each).
size_t packed_head_floats(int T, int hd) {
  return 2 * size_t(T) + attention_bf16_avx512_packed_words(T, hd);
}

// A head's slice of `att` as the register-tile kernels take it: (probs, stats, packed),
// probs or stats null, packed null but in the row_stats_packed form. row_stats: att holds the
// (B, NH, T, 2) statistics; row_stats_packed: per head, packed_head_floats.
struct HeadSaved {
  float* probs;
  float* stats;
  uint32_t* packed;
};
HeadSaved head_saved(float* att, const HeadOffsets& o, AttentionSaved saved, int T, int hd) {
  if (saved == AttentionSaved::row_stats) return {nullptr, att + o.stats, nullptr};
  if (saved == AttentionSaved::row_stats_packed) {
    float* head = att + o.bh * packed_head_floats(T, hd);
    return {nullptr, head, reinterpret_cast<uint32_t*>(head + 2 * size_t(T))};
  }
  return {att + o.att, nullptr, nullptr};
}

// row_stats needs a kernel that recomputes P, row_stats_packed the one that packs bf16
// pairs; anything else is a caller's mistake.
void check_saved(AttentionKernel k, AttentionSaved saved) {
  MT_CHECK(saved == AttentionSaved::probabilities || k == AttentionKernel::fp32_avx512 ||
               k == AttentionKernel::bf16_avx512,
           "attention: row statistics need a register-tile kernel, not ", attention_kernel_name(k));
  MT_CHECK(saved != AttentionSaved::row_stats_packed || k == AttentionKernel::bf16_avx512,
           "attention: saved packed operands need the AVX512-BF16 tiles, not ",
           attention_kernel_name(k));
}

struct NoPrefetch {
  void operator()(const HeadOffsets&) const {}
};

// fn(head view, offsets) for every (batch, head) pair, the pairs split over OpenMP; before
// each, prefetch(offsets) of the pair the thread most likely runs next (static chunks are
// consecutive pairs), so its operands arrive while this one computes.
template <class Fn, class Prefetch = NoPrefetch>
void for_each_head(const float* qkv, int B, int T, int C, int NH, Fn fn, Prefetch prefetch = {}) {
  const int hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const int nb = h + 1 < NH ? b : b + 1, nh = h + 1 < NH ? h + 1 : 0;
      if (nb < B) prefetch(head_offsets(nb, nh, T, C, NH, hd));
      const HeadOffsets o = head_offsets(b, h, T, C, NH, hd);
      fn(AttentionHead{qkv + o.q, qkv + o.k, qkv + o.v, 3 * C, T, hd, scale}, o);
    }
  }
}

// Into L2: the next head's q, k, v rows (and, backward, its dout rows). A head's rows are
// a few cache lines every 3C (or C) floats, a stride the hardware prefetchers lose at each
// page. Measured on the AMX kernels at B 8, T 128, hd 32, 1 thread, the caches flushed
// between layers as in a step (CPU time, best of 5 under load): forward 1.41 -> 1.33 ms,
// backward 2.56 -> 2.29 ms; prefetching the outputs for writing (slower forward) or the
// probabilities (no gain) did not pay.
void prefetch_rows(const float* p, size_t ld, int rows, int cols) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c += 16) __builtin_prefetch(p + r * ld + c, 0, 2);
}

auto next_head_prefetch(const float* qkv, const float* dout, int T, int C, int hd) {
  return [=](const HeadOffsets& o) {
    for (size_t off : {o.q, o.k, o.v}) prefetch_rows(qkv + off, 3 * C, T, hd);
    if (dout) prefetch_rows(dout + o.row, C, T, hd);
  };
}

// The fp32 register tiles' dP / dS of one head, per thread (grown to the largest head seen,
// never freed), as the bf16 kernel keeps its own: written and re-read within the head, so it
// stays in L2 (64 KB at T 128) instead of streaming (B, NH, T, T) floats through memory.
float* thread_head_gradient(int T) {
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(T) * T) buf.resize(size_t(T) * T);
  return buf.data();
}

// Row i of a (T, T) block: causal softmax in place over columns 0..i, zeros after.
void softmax_causal_row(float* row, int i, int T) {
  float m = row[0];
  for (int j = 1; j <= i; j++) m = row[j] > m ? row[j] : m;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j <= i; j++) {
    float e = exp_vec(row[j] - m);
    row[j] = e;
    sum += e;
  }
  float inv = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j <= i; j++) row[j] *= inv;
  for (int j = i + 1; j < T; j++) row[j] = 0.0f;
}

// out (T, hd), row stride ldo; a (T, T).
void forward_head_sgemm(const AttentionHead& hv, float* o, int ldo, float* a) {
  const int T = hv.T, hd = hv.hd;
  for (int i0 = 0; i0 < T; i0 += kRowBlock) {
    int i1 = i0 + kRowBlock < T ? i0 + kRowBlock : T;
    float* ablk = a + static_cast<size_t>(i0) * T;
    // preatt[i0:i1, 0:i1] = scale * q[i0:i1] k[0:i1]^T
    sgemm(false, true, i1 - i0, i1, hd, hv.scale, hv.q + static_cast<size_t>(i0) * hv.ld, hv.ld,
          hv.k, hv.ld, 0.0f, ablk, T);
    for (int i = i0; i < i1; i++) softmax_causal_row(a + static_cast<size_t>(i) * T, i, T);
    // out[i0:i1] = att[i0:i1, 0:i1] v[0:i1]
    sgemm(false, false, i1 - i0, hd, i1, 1.0f, ablk, T, hv.v, hv.ld, 0.0f,
          o + static_cast<size_t>(i0) * ldo, ldo);
  }
}

// dq, dk, dv (T, hd), row stride ld; dout_h (T, hd), row stride ldo; a, da (T, T).
// accumulate false: overwritten (beta 0; each row block of dq, dk, dv is one product).
void backward_head_sgemm(const AttentionHead& hv, float* dq, float* dk, float* dv, int ld,
                         const float* dout_h, int ldo, const float* a, float* da, bool accumulate) {
  const int T = hv.T, hd = hv.hd;
  const float beta = accumulate ? 1.0f : 0.0f;
  for (int i0 = 0; i0 < T; i0 += kRowBlock) {
    int i1 = i0 + kRowBlock < T ? i0 + kRowBlock : T;
    // datt[i0:i1, 0:i1] = dout[i0:i1] v[0:i1]^T
    sgemm(false, true, i1 - i0, i1, hd, 1.0f, dout_h + static_cast<size_t>(i0) * ldo, ldo, hv.v,
          hv.ld, 0.0f, da + static_cast<size_t>(i0) * T, T);
    // Softmax backward, with the 1/sqrt(hd) of the forward folded in:
    // dpre = scale * att * (datt - sum_j att * datt).
    for (int i = i0; i < i1; i++) {
      const float* ar = a + static_cast<size_t>(i) * T;
      float* dr = da + static_cast<size_t>(i) * T;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int j = 0; j <= i; j++) dot += ar[j] * dr[j];
#pragma omp simd
      for (int j = 0; j <= i; j++) dr[j] = hv.scale * ar[j] * (dr[j] - dot);
      for (int j = i + 1; j < i1; j++) dr[j] = 0.0f;
    }
    // dq[i0:i1] += dpre[i0:i1, 0:i1] k[0:i1]
    sgemm(false, false, i1 - i0, hd, i1, 1.0f, da + static_cast<size_t>(i0) * T, T, hv.k, hv.ld,
          beta, dq + static_cast<size_t>(i0) * ld, ld);
  }
  // Key/value rows j0..j1 receive from query rows i >= j0 only (the lower triangle).
  for (int j0 = 0; j0 < T; j0 += kRowBlock) {
    int j1 = j0 + kRowBlock < T ? j0 + kRowBlock : T;
    int rows = T - j0;
    // dv[j0:j1] += att[j0:T, j0:j1]^T dout[j0:T]
    sgemm(true, false, j1 - j0, hd, rows, 1.0f, a + static_cast<size_t>(j0) * T + j0, T,
          dout_h + static_cast<size_t>(j0) * ldo, ldo, beta, dv + static_cast<size_t>(j0) * ld, ld);
    // dk[j0:j1] += dpre[j0:T, j0:j1]^T q[j0:T]
    sgemm(true, false, j1 - j0, hd, rows, 1.0f, da + static_cast<size_t>(j0) * T + j0, T,
          hv.q + static_cast<size_t>(j0) * hv.ld, hv.ld, beta, dk + static_cast<size_t>(j0) * ld,
          ld);
  }
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       AttentionSaved saved) {
  PhaseScope phase_scope(Phase::attention, 2.0 * B * T * T * C,
                         4.0 * (4.0 * B * T * C + double(B) * NH * T * T));
  // qkv is (B, T, 3C), out is (B, T, C), att is (B, NH, T, T) or (B, NH, T, 2).
  const bool fast = attention_avx512_supports(C / NH);
  check_saved(attention_kernel(false, C, NH), saved);
  for_each_head(qkv, B, T, C, NH, [&](const AttentionHead& hv, const HeadOffsets& o) {
    const HeadSaved hs = head_saved(att, o, saved, T, C / NH);
    if (fast)
      attention_head_forward_avx512(hv, out + o.row, C, hs.probs, hs.stats);
    else
      forward_head_sgemm(hv, out + o.row, C, att + o.att);
  });
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH, AttentionSaved saved,
                        bool accumulate) {
  PhaseScope phase_scope(Phase::attention, 4.0 * B * T * T * C,
                         4.0 * (8.0 * B * T * C + 2.0 * B * NH * T * T));
  // dqkv, qkv are (B, T, 3C); dout is (B, T, C); scratch is (B, NH, T, T), att that or
  // (B, NH, T, 2).
  const bool fast = attention_avx512_supports(C / NH);
  check_saved(attention_kernel(false, C, NH), saved);
  for_each_head(qkv, B, T, C, NH, [&](const AttentionHead& hv, const HeadOffsets& o) {
    float *dq = dqkv + o.q, *dk = dqkv + o.k, *dv = dqkv + o.v;
    const HeadSaved hs = head_saved(const_cast<float*>(att), o, saved, T, C / NH);
    if (fast)
      attention_head_backward_avx512(hv, dq, dk, dv, 3 * C, dout + o.row, C, hs.probs,
                                     thread_head_gradient(T), hs.stats, accumulate);
    else
      backward_head_sgemm(hv, dq, dk, dv, 3 * C, dout + o.row, C, att + o.att, scratch + o.att,
                          accumulate);
  });
}

size_t attention_saved_floats(AttentionSaved saved, int B, int T, int C, int NH) {
  const size_t heads = size_t(B) * NH;
  switch (saved) {
    case AttentionSaved::row_stats:
      return heads * T * 2;
    case AttentionSaved::row_stats_packed:
      return heads * packed_head_floats(T, C / NH);
    default:
      return heads * T * size_t(T);
  }
}

void attention_forward_bf16(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                            AmxTiles amx, AttentionSaved saved) {
  PhaseScope phase_scope(Phase::attention, 2.0 * B * T * T * C,
                         4.0 * (4.0 * B * T * C + double(B) * NH * T * T));
  const AttentionKernel k = attention_kernel(true, C, NH, amx);
  check_saved(k, saved);
  if (k == AttentionKernel::bf16_amx_tiles)
    return for_each_head(
        qkv, B, T, C, NH,
        [&](const AttentionHead& hv, const HeadOffsets& o) {
          attention_head_forward_amx(hv, out + o.row, C, att + o.att);
        },
        next_head_prefetch(qkv, nullptr, T, C, C / NH));
  if (k == AttentionKernel::bf16_amx)
    return attention_forward_bf16_batched(out, att, qkv, B, T, C, NH);
  if (k != AttentionKernel::bf16_avx512)
    return attention_forward(out, att, qkv, B, T, C, NH, saved);
  for_each_head(
      qkv, B, T, C, NH,
      [&](const AttentionHead& hv, const HeadOffsets& o) {
        const HeadSaved hs = head_saved(att, o, saved, T, C / NH);
        attention_head_forward_bf16(hv, out + o.row, C, hs.probs, hs.stats, hs.packed);
      },
      next_head_prefetch(qkv, nullptr, T, C, C / NH));
}

void attention_backward_bf16(float* dqkv, float* scratch, const float* dout, const float* qkv,
                             const float* att, int B, int T, int C, int NH, bool accumulate,
                             AmxTiles amx, AttentionSaved saved) {
  PhaseScope phase_scope(Phase::attention, 4.0 * B * T * T * C,
                         4.0 * (8.0 * B * T * C + 2.0 * B * NH * T * T));
  const AttentionKernel k = attention_kernel(true, C, NH, amx);
  check_saved(k, saved);
  if (k == AttentionKernel::bf16_amx_tiles)
    return for_each_head(
        qkv, B, T, C, NH,
        [&](const AttentionHead& hv, const HeadOffsets& o) {
          attention_head_backward_amx(hv, dqkv + o.q, dqkv + o.k, dqkv + o.v, 3 * C, dout + o.row,
                                      C, att + o.att, accumulate);
        },
        next_head_prefetch(qkv, dout, T, C, C / NH));
  if (k == AttentionKernel::bf16_amx)
    return attention_backward_bf16_batched(dqkv, scratch, dout, qkv, att, B, T, C, NH, accumulate);
  if (k != AttentionKernel::bf16_avx512)
    return attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH, saved, accumulate);
  for_each_head(
      qkv, B, T, C, NH,
      [&](const AttentionHead& hv, const HeadOffsets& o) {
        const HeadSaved hs = head_saved(const_cast<float*>(att), o, saved, T, C / NH);
        attention_head_backward_bf16(hv, dqkv + o.q, dqkv + o.k, dqkv + o.v, 3 * C, dout + o.row, C,
                                     hs.probs, accumulate, hs.stats, hs.packed);
      },
      next_head_prefetch(qkv, dout, T, C, C / NH));
}

void attention_forward_bf16_out16(bf16* out16, float* stage, float* att, const float* qkv, int B,
                                  int T, int C, int NH, AmxTiles amx, AttentionSaved saved) {
  PhaseScope phase_scope(Phase::attention, 2.0 * B * T * T * C,
                         4.0 * (4.0 * B * T * C + double(B) * NH * T * T));
  const AttentionKernel k = attention_kernel(true, C, NH, amx);
  check_saved(k, saved);
  if (k == AttentionKernel::bf16_amx_tiles)
    return for_each_head(
        qkv, B, T, C, NH,
        [&](const AttentionHead& hv, const HeadOffsets& o) {
          attention_head_forward_amx(hv, out16 + o.row, C, att + o.att);
        },
        next_head_prefetch(qkv, nullptr, T, C, C / NH));
  if (k == AttentionKernel::bf16_amx)
    return attention_forward_bf16_batched(out16, att, qkv, B, T, C, NH);
  if (k != AttentionKernel::bf16_avx512) {
    attention_forward(stage, att, qkv, B, T, C, NH, saved);
    return to_bf16(out16, stage, size_t(B) * T * C);
  }
  for_each_head(
      qkv, B, T, C, NH,
      [&](const AttentionHead& hv, const HeadOffsets& o) {
        const HeadSaved hs = head_saved(att, o, saved, T, C / NH);
        attention_head_forward_bf16(hv, out16 + o.row, C, hs.probs, hs.stats, hs.packed);
      },
      next_head_prefetch(qkv, nullptr, T, C, C / NH));
}

void attention_backward_bf16_out16(bf16* dqkv16, float* stage, float* scratch, const float* dout,
                                   const float* qkv, const float* att, int B, int T, int C, int NH,
                                   AmxTiles amx, AttentionSaved saved) {
  PhaseScope phase_scope(Phase::attention, 4.0 * B * T * T * C,
                         4.0 * (8.0 * B * T * C + 2.0 * B * NH * T * T));
  const AttentionKernel k = attention_kernel(true, C, NH, amx);
  check_saved(k, saved);
  if (k == AttentionKernel::bf16_amx_tiles)
    return for_each_head(
        qkv, B, T, C, NH,
        [&](const AttentionHead& hv, const HeadOffsets& o) {
          attention_head_backward_amx(hv, dqkv16 + o.q, dqkv16 + o.k, dqkv16 + o.v, 3 * C,
                                      dout + o.row, C, att + o.att);
        },
        next_head_prefetch(qkv, dout, T, C, C / NH));
  if (k == AttentionKernel::bf16_amx)
    return attention_backward_bf16_batched(dqkv16, scratch, dout, qkv, att, B, T, C, NH);
  if (k != AttentionKernel::bf16_avx512 || T > kAttentionBf16DirectMaxT) {
    attention_backward_bf16(stage, scratch, dout, qkv, att, B, T, C, NH, /*accumulate=*/false, amx,
                            saved);
    return to_bf16(dqkv16, stage, size_t(B) * T * 3 * C);
  }
  for_each_head(
      qkv, B, T, C, NH,
      [&](const AttentionHead& hv, const HeadOffsets& o) {
        const HeadSaved hs = head_saved(const_cast<float*>(att), o, saved, T, C / NH);
        attention_head_backward_bf16(hv, dqkv16 + o.q, dqkv16 + o.k, dqkv16 + o.v, 3 * C,
                                     dout + o.row, C, hs.probs, hs.stats, hs.packed);
      },
      next_head_prefetch(qkv, dout, T, C, C / NH));
}

}  // namespace mt
