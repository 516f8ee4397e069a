// The AVX512-BF16 register-tile attention (kernels/attention_bf16_avx512.cpp) for one head,
// written as scalar loops over bf16_exact_ops.h: the kernel's roundings in the kernel's order,
// so its outputs are compared bit for bit. What it follows:
//  - q, k, v, dout, P and dS rounded to bf16 as the packers round them (nearest even, DAZ);
//  - each score, dP, out, dq, dk, dv element one chain of vdpbf16ps over pairs of the reduction
//    index in ascending order (pair kp = elements 2 kp, 2 kp + 1); a pair past the diagonal
//    adds exact zeros, so the chains stop at the diagonal;
//  - scores and dP times the scale (1 for dP) after the chain;
//  - the softmax's and its backward's 16-lane sums (lane l: keys j = l mod 16, ascending),
//    then the reduction tree;
//  - dk, dv: the query rows in blocks of kQueryRows (kAttentionBf16DirectMaxT), one chain per
//    block starting at the key tile's first row (tiles of rows_per_tile keys), blocks added.
#pragma once

#include <algorithm>
#include <vector>

#include "kernels/bf16_exact_ops.h"

namespace mt::bf16_exact {

struct HeadRef {
  const float* q;
  const float* k;
  const float* v;
  int ld, T, hd;
  float scale;
};

// rows_per_tile (kernels/attention_avx512_tiles.h): the key tile of the dk / dv products.
inline int key_tile_rows(int hd) {
  return hd <= 32 ? 8 : hd == 64 ? 6 : 3;
}

// x (rows, hd) with row stride ld, rounded: the packed operand as floats.
inline std::vector<float> rounded(const float* x, int ld, int rows, int hd) {
  std::vector<float> r(size_t(rows) * hd);
  for (int i = 0; i < rows; i++)
    for (int d = 0; d < hd; d++) r[size_t(i) * hd + d] = round_cvtne(x[size_t(i) * ld + d]);
  return r;
}

// sum over d of a[d] b[d] as the scores tile chains it (a, b rounded rows of length hd).
inline float dot_chain(const float* a, const float* b, int hd) {
  float acc = 0.0f;
  for (int p = 0; p < hd / 2; p++)
    acc = bf16_dot_pair(acc, a[2 * p], a[2 * p + 1], b[2 * p], b[2 * p + 1]);
  return acc;
}

// Row i of the causal softmax of s (scores 0..i): P in p[0..i], as softmax_causal_row.
inline void softmax_row(const float* s, int i, float* p) {
  float m = s[0];
  for (int j = 1; j <= i; j++) m = std::max(m, s[j]);
  float lanes[16] = {};
  for (int j = 0; j <= i; j++) {
    const float diff = s[j] - m;
    p[j] = exp_lane(diff);
    lanes[j % 16] = lanes[j % 16] + p[j];
  }
  const float inv = 1.0f / reduce_add16(lanes);
  for (int j = 0; j <= i; j++) p[j] = kept(p[j] * inv);
}

// c (n, hd) row r = sum over rows t in [t0, t1) of w(r, t) y[t]: a rows product's chain over
// pairs of t from t0 (even) on, w rounded and y rounded (stride hd).
template <class W>
float rows_chain(W w, const float* y, int hd, int d, int t0, int t1, int T) {
  float acc = 0.0f;
  for (int t = t0; t < t1; t += 2) {
    const float hi = t + 1 < T ? w(t + 1) : 0.0f;
    const float yhi = t + 1 < T ? y[size_t(t + 1) * hd + d] : 0.0f;
    acc = bf16_dot_pair(acc, w(t), hi, y[size_t(t) * hd + d], yhi);
  }
  return acc;
}

struct ForwardRef {
  std::vector<float> out, p;  // (T, hd), (T, T) with zeros above the diagonal
};

inline ForwardRef forward(const HeadRef& h) {
  const int T = h.T, hd = h.hd;
  const std::vector<float> q = rounded(h.q, h.ld, T, hd), k = rounded(h.k, h.ld, T, hd),
                           v = rounded(h.v, h.ld, T, hd);
  ForwardRef f{std::vector<float>(size_t(T) * hd), std::vector<float>(size_t(T) * T, 0.0f)};
  std::vector<float> s(T);
  for (int i = 0; i < T; i++) {
    for (int j = 0; j <= i; j++) {
      const float raw = dot_chain(&q[size_t(i) * hd], &k[size_t(j) * hd], hd);
      s[j] = kept(raw * h.scale);
    }
    float* p = &f.p[size_t(i) * T];
    softmax_row(s.data(), i, p);
    for (int d = 0; d < hd; d++)
      f.out[size_t(i) * hd + d] = rows_chain(
          [&](int t) { return t <= i ? round_cvtne(p[t]) : 0.0f; }, v.data(), hd, d, 0, i + 1, T);
  }
  return f;
}

struct BackwardRef {
  std::vector<float> dq, dk, dv;  // (T, hd) each
};

// dS (T, T) from P and dout: dP by the scores chain, the row dot product in 16 FMA lanes,
// dS = (scale P) (dP - dot).
inline std::vector<float> softmax_grad(const HeadRef& h, const std::vector<float>& p,
                                       const std::vector<float>& dor, const std::vector<float>& v) {
  const int T = h.T, hd = h.hd;
  std::vector<float> ds(size_t(T) * T, 0.0f), dp(T);
  for (int i = 0; i < T; i++) {
    const float* pr = &p[size_t(i) * T];
    float lanes[16] = {};
    for (int j = 0; j <= i; j++) {
      dp[j] = kept(dot_chain(&dor[size_t(i) * hd], &v[size_t(j) * hd], hd) * 1.0f);
      lanes[j % 16] = std::fmaf(pr[j], dp[j], lanes[j % 16]);
    }
    const float dot = reduce_add16(lanes);
    for (int j = 0; j <= i; j++) {
      const float sp = kept(h.scale * pr[j]);
      const float diff = dp[j] - dot;
      ds[size_t(i) * T + j] = sp * diff;
    }
  }
  return ds;
}

inline BackwardRef backward(const HeadRef& h, const float* dout, int lddo,
                            const std::vector<float>& p) {
  const int T = h.T, hd = h.hd, R = key_tile_rows(hd), kQueryRows = 128;
  const std::vector<float> q = rounded(h.q, h.ld, T, hd), k = rounded(h.k, h.ld, T, hd),
                           v = rounded(h.v, h.ld, T, hd), dor = rounded(dout, lddo, T, hd);
  const std::vector<float> ds = softmax_grad(h, p, dor, v);
  BackwardRef b{std::vector<float>(size_t(T) * hd), std::vector<float>(size_t(T) * hd),
                std::vector<float>(size_t(T) * hd)};
  auto at = [T](const std::vector<float>& m, int r, int c) {
    return r < T && c <= r ? round_cvtne(m[size_t(r) * T + c]) : 0.0f;
  };
  for (int i = 0; i < T; i++)
    for (int d = 0; d < hd; d++)
      b.dq[size_t(i) * hd + d] =
          rows_chain([&](int t) { return at(ds, i, t); }, k.data(), hd, d, 0, i + 1, T);
  for (int j = 0; j < T; j++) {
    const int j0 = j / R * R;  // the key tile's first key
    for (int d = 0; d < hd; d++) {
      float dk = 0.0f, dv = 0.0f;
      for (int r0 = 0; r0 < T; r0 += kQueryRows) {
        const int r1 = std::min(T, r0 + kQueryRows), t0 = std::max(j0, r0) / 2 * 2;
        if (j0 >= r1) continue;  // the tile is past this block's rows: all zeros
        const float pk =
            rows_chain([&](int t) { return at(ds, t, j); }, q.data(), hd, d, t0, r1, T);
        const float pv =
            rows_chain([&](int t) { return at(p, t, j); }, dor.data(), hd, d, t0, r1, T);
        dk = j0 >= r0 ? pk : dk + pk;
        dv = j0 >= r0 ? pv : dv + pv;
      }
      b.dk[size_t(j) * hd + d] = dk;
      b.dv[size_t(j) * hd + d] = dv;
    }
  }
  return b;
}

}  // namespace mt::bf16_exact
