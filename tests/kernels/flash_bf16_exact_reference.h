// Flash attention's AVX512-BF16 tiles (kernels/flash_attention_bf16.cpp under the drivers
// flash_attention_forward.cpp and flash_attention_backward.cpp) for one worker's causal
// layout (positions 0 .. T-1, no RoPE, no dropout), as scalar loops over bf16_exact_ops.h in
// the drivers' order, so the kernels' outputs are compared bit for bit:
//  - forward, per row: key blocks of 32 in order; scores one vdpbf16ps chain each times the
//    scale; the online-softmax step (max, c = exp_vec(m_old - m_new), P = exp_vec512 lanes,
//    l = l c + the block's 32-lane sum by GCC's tree, the accumulator times c); the block's
//    P v one chain over its 16 key pairs added to the accumulator; out = o (1 / l),
//    lse = m + log(l);
//  - backward, from the kernels' lse and D: P = exp(S - lse), dS = (scale P)(dP - D); per
//    key, dK and dV one chain per (query head of the group, 64-row query block) over query
//    pairs, added in that order; dq's partial per key chunk (chunk c: key blocks c, c + C,
//    ...), one chain per key block added in order, the partials summed in chunk order.
// l c + sum is mul_add (kernels/vec_math.h) in both, one rounding where the build has FMA;
// exp_vec, which c comes from, is the kernels' own inline function under the same flags.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/bf16_exact_ops.h"
#include "kernels/flash_attention.h"
#include "kernels/vec_math.h"

namespace mt::bf16_exact {

constexpr int kKeys = 32, kQueryRows = 64;

// One call's operands: (B * T, ld) rows, heads side by side; rounded copies per head.
struct FlashRef {
  int B, T, H, Hkv, hd;
  std::vector<float> q, k, v;  // rounded to bf16, (B, heads, T, hd); rows >= T absent
  float scale;
  FlashRef(const FlashAttention& a)
      : B(a.B), T(a.Tq), H(a.H), Hkv(a.Hkv), hd(a.hd), scale(1.0f / std::sqrt(float(a.hd))) {
    q = gather(a.q, a.ldq, H), k = gather(a.k, a.ldk, Hkv), v = gather(a.v, a.ldv, Hkv);
  }
  std::vector<float> gather(const float* x, size_t ld, int heads) const {
    std::vector<float> r(size_t(B) * heads * T * hd);
    for (int b = 0; b < B; b++)
      for (int h = 0; h < heads; h++)
        for (int t = 0; t < T; t++)
          for (int d = 0; d < hd; d++)
            r[((size_t(b) * heads + h) * T + t) * hd + d] =
                round_cvtne(x[(size_t(b) * T + t) * ld + size_t(h) * hd + d]);
    return r;
  }
  // Row t of head h of sequence b in a gathered operand (null past T: zero rows).
  const float* row(const std::vector<float>& x, int heads, int b, int h, int t) const {
    return t < T ? &x[((size_t(b) * heads + h) * T + t) * hd] : nullptr;
  }
  float at(const float* r, int d) const { return r ? r[d] : 0.0f; }
  // A pair chain over rows t0, t0 + 2, ... < t1 of w(t) times x's row t, column d.
  template <class W>
  float chain(W w, const std::vector<float>& x, int heads, int b, int h, int d, int t0,
              int t1) const {
    float acc = 0.0f;
    for (int t = t0; t < t1; t += 2)
      acc = bf16_dot_pair(acc, w(t), w(t + 1), at(row(x, heads, b, h, t), d),
                          at(row(x, heads, b, h, t + 1), d));
    return acc;
  }
  // The score of query row i (head h) against key j (kv head g), padded keys 0.
  float score(const std::vector<float>& x, int b, int h, int i, int g, int j, float alpha,
              const std::vector<float>& y) const {
    const float* a = row(x, H, b, h, i);
    const float* c = row(y, Hkv, b, g, j);
    float acc = 0.0f;
    for (int p = 0; p < hd / 2; p++)
      acc = bf16_dot_pair(acc, a[2 * p], a[2 * p + 1], at(c, 2 * p), at(c, 2 * p + 1));
    return kept(acc * alpha);
  }
};

struct FlashForwardRef {
  std::vector<float> out, lse;  // (B * T, H * hd), (B, H, T)
};

inline FlashForwardRef flash_forward(const FlashRef& f) {
  const int T = f.T, hd = f.hd, G = f.H / f.Hkv;
  FlashForwardRef r{std::vector<float>(size_t(f.B) * T * f.H * hd),
                    std::vector<float>(size_t(f.B) * f.H * T)};
  std::vector<float> o(hd);
  for (int b = 0; b < f.B; b++)
    for (int h = 0; h < f.H; h++)
      for (int i = 0; i < T; i++) {
        float m = -INFINITY, l = 0.0f;
        std::fill(o.begin(), o.end(), 0.0f);
        for (int j0 = 0; j0 <= i; j0 += kKeys) {
          float s[kKeys], p[kKeys], mx = -INFINITY;
          for (int j = 0; j < kKeys; j++) {
            s[j] = f.score(f.q, b, h, i, h / G, j0 + j, f.scale, f.k);
            if (j0 + j <= i) mx = std::max(mx, s[j]);
          }
          const float mnew = m > mx ? m : mx;
          const float c = m == -INFINITY || m == mnew ? 1.0f : exp_vec(m - mnew);
          float lanes[16];
          for (int j = 0; j < kKeys; j++) {
            const float diff = s[j] - mnew;
            p[j] = j0 + j <= i ? exp_lane(diff) : 0.0f;
          }
          for (int j = 0; j < 16; j++) lanes[j] = p[j] + p[j + 16];
          l = mul_add(l, c, reduce_add16(lanes));
          m = mnew;
          for (int d = 0; d < hd; d++) {
            if (c != 1.0f) o[d] = kept(o[d] * c);
            const float pv = f.chain([&](int t) { return round_cvtne(p[t - j0]); }, f.v, f.Hkv, b,
                                     h / G, d, j0, j0 + kKeys);
            o[d] = o[d] + pv;
          }
        }
        const float inv = 1.0f / l;
        for (int d = 0; d < hd; d++)
          r.out[(size_t(b) * T + i) * f.H * hd + h * hd + d] = o[d] * inv;
        r.lse[(size_t(b) * f.H + h) * T + i] = m + std::log(l);
      }
  return r;
}

struct FlashBackwardRef {
  std::vector<float> dq, dk, dv;  // (B * T, H * hd), (B * T, Hkv * hd) x 2: the sums alone
};

// dout gathered and rounded like q; lse, D (B, H, T) as the kernels computed them.
inline FlashBackwardRef flash_backward(const FlashRef& f, const std::vector<float>& dout,
                                       const float* lse, const float* D) {
  const int T = f.T, hd = f.hd, H = f.H, G = H / f.Hkv, nkb = (T + kKeys - 1) / kKeys;
  const int C = std::max(1, std::min(nkb, (4 + f.Hkv - 1) / f.Hkv));
  FlashBackwardRef r{std::vector<float>(size_t(f.B) * T * H * hd),
                     std::vector<float>(size_t(f.B) * T * f.Hkv * hd),
                     std::vector<float>(size_t(f.B) * T * f.Hkv * hd)};
  for (int b = 0; b < f.B; b++) {
    // P and dS of every (head, row, key), fp32.
    std::vector<float> P(size_t(H) * T * nkb * kKeys, 0.0f), dS = P;
    for (int h = 0; h < H; h++)
      for (int i = 0; i < T; i++)
        for (int j = 0; j <= i; j++) {
          const size_t x = (size_t(h) * T + i) * nkb * kKeys + j;
          const float L = lse[(size_t(b) * H + h) * T + i], Dv = D[(size_t(b) * H + h) * T + i];
          const float diff = f.score(f.q, b, h, i, h / G, j, f.scale, f.k) - L;
          P[x] = exp_lane(diff);
          const float dp = f.score(dout, b, h, i, h / G, j, 1.0f, f.v);
          const float sp = kept(f.scale * P[x]);
          const float dd = dp - Dv;
          dS[x] = sp * dd;
        }
    auto pick = [&](const std::vector<float>& m, int h, int i, int j) {
      return i < T && j <= i ? round_cvtne(m[(size_t(h) * T + i) * nkb * kKeys + j]) : 0.0f;
    };
    // dk, dv: per key, over the group's heads and the query blocks.
    for (int g = 0; g < f.Hkv; g++)
      for (int j = 0; j < T; j++)
        for (int d = 0; d < hd; d++) {
          float dk = 0.0f, dv = 0.0f;
          for (int h = g * G; h < (g + 1) * G; h++)
            for (int i0 = 0; i0 < T; i0 += kQueryRows) {
              const int i1 = std::min(T, i0 + kQueryRows);
              if (i1 - 1 < j / kKeys * kKeys) continue;  // no row of the block sees the keys
              dk = dk + f.chain([&](int t) { return pick(dS, h, t, j); }, f.q, H, b, h, d, i0, i1);
              dv = dv + f.chain([&](int t) { return pick(P, h, t, j); }, dout, H, b, h, d, i0, i1);
            }
          r.dk[(size_t(b) * T + j) * f.Hkv * hd + g * hd + d] = dk;
          r.dv[(size_t(b) * T + j) * f.Hkv * hd + g * hd + d] = dv;
        }
    // dq: chunk partials, each a sum of per-key-block chains.
    for (int h = 0; h < H; h++)
      for (int i = 0; i < T; i++)
        for (int d = 0; d < hd; d++) {
          float sum = 0.0f;
          for (int c = 0; c < C; c++) {
            float part = 0.0f;
            for (int kb = c; kb < nkb && kb * kKeys <= i; kb += C)
              part = part + f.chain([&](int t) { return pick(dS, h, i, t); }, f.k, f.Hkv, b, h / G,
                                    d, kb * kKeys, (kb + 1) * kKeys);
            sum = c == 0 ? part : sum + part;
          }
          r.dq[(size_t(b) * T + i) * H * hd + h * hd + d] = sum;
        }
  }
  return r;
}

}  // namespace mt::bf16_exact
