#include "kernels/reference/attention_dropout.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace mt {

namespace {

// The kept-and-scaled factor m(t, u) * 1/(1-p) of keys 0..t of one query row.
void row_mask(float* factor, int t, int T, int64_t token, int64_t head, const AttentionDropout& d) {
  const float scale = 1.0f / (1.0f - d.p);
  for (int u = 0; u <= t; ++u)
    factor[u] = dropout_keeps(d.key, d.p, token, head * T + u) ? scale : 0.0f;
}

struct Head {
  const float *q, *k, *v;  // row stride 3C
  size_t stride;
  int hd;
  float scale;
};

Head head_of(const float* qkv, int b, int h, int T, int C, int NH) {
  const int hd = C / NH;
  const float* base = qkv + size_t(b) * T * 3 * C + size_t(h) * hd;
  return {base, base + C, base + 2 * C, size_t(3) * C, hd, 1.0f / std::sqrt(float(hd))};
}

float dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One (batch, head) pair: probabilities into att (T, T), dropped ones times v into out.
void forward_head(float* out, size_t out_stride, float* att, const Head& hd, int T,
                  const int64_t* tokens, int64_t head, const AttentionDropout& d,
                  std::vector<float>& factor) {
  for (int t = 0; t < T; ++t) {
    float* row = att + size_t(t) * T;
    float m = -INFINITY;
    for (int u = 0; u <= t; ++u) {
      row[u] = dot(hd.q + t * hd.stride, hd.k + u * hd.stride, hd.hd) * hd.scale;
      m = std::max(m, row[u]);
    }
    float sum = 0;
    for (int u = 0; u <= t; ++u) sum += row[u] = std::exp(row[u] - m);
    for (int u = 0; u <= t; ++u) row[u] /= sum;
    std::fill(row + t + 1, row + T, 0.0f);
    row_mask(factor.data(), t, T, tokens[t], head, d);
    float* o = out + size_t(t) * out_stride;
    std::fill(o, o + hd.hd, 0.0f);
    for (int u = 0; u <= t; ++u) {
      const float w = row[u] * factor[size_t(u)];
      if (w == 0.0f) continue;
      const float* vu = hd.v + u * hd.stride;
      for (int i = 0; i < hd.hd; ++i) o[i] += w * vu[i];
    }
  }
}

// dq, dk, dv of one pair (row stride 3C, zeroed by the caller) from dout.
void backward_head(float* dq, float* dk, float* dv, const float* dout, size_t dout_stride,
                   const float* att, const Head& hd, int T, const int64_t* tokens, int64_t head,
                   const AttentionDropout& d, std::vector<float>& factor,
                   std::vector<float>& d_att) {
  for (int t = 0; t < T; ++t) {
    const float* row = att + size_t(t) * T;
    const float* go = dout + size_t(t) * dout_stride;
    row_mask(factor.data(), t, T, tokens[t], head, d);
    float weighted = 0;  // sum_u att_u * d_att_u, the softmax backward's correction
    for (int u = 0; u <= t; ++u) {
      const float f = factor[size_t(u)];
      // d(dropped prob) = dout . v_u; dv_u += dropped prob * dout.
      d_att[size_t(u)] = f == 0.0f ? 0.0f : dot(go, hd.v + u * hd.stride, hd.hd) * f;
      const float w = row[u] * f;
      float* dvu = dv + u * hd.stride;
      if (w != 0.0f)
        for (int i = 0; i < hd.hd; ++i) dvu[i] += w * go[i];
      weighted += row[u] * d_att[size_t(u)];
    }
    float* dqt = dq + t * hd.stride;
    for (int u = 0; u <= t; ++u) {
      const float ds = row[u] * (d_att[size_t(u)] - weighted) * hd.scale;
      if (ds == 0.0f) continue;
      const float* ku = hd.k + u * hd.stride;
      const float* qt = hd.q + t * hd.stride;
      float* dku = dk + u * hd.stride;
      for (int i = 0; i < hd.hd; ++i) {
        dqt[i] += ds * ku[i];
        dku[i] += ds * qt[i];
      }
    }
  }
}

}  // namespace

void attention_dropout_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                               int NH, const AttentionDropout& d) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      std::vector<float> factor(static_cast<size_t>(T));
      const Head hd = head_of(qkv, b, h, T, C, NH);
      forward_head(out + size_t(b) * T * C + size_t(h) * hd.hd, size_t(C),
                   att + (size_t(b) * NH + h) * T * T, hd, T, d.row_tokens + size_t(b) * T,
                   d.head_offset + h, d, factor);
    }
  }
}

void attention_dropout_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                                int B, int T, int C, int NH, const AttentionDropout& d) {
  std::memset(dqkv, 0, sizeof(float) * size_t(B) * T * 3 * C);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      std::vector<float> factor(static_cast<size_t>(T)), d_att(static_cast<size_t>(T));
      const Head hd = head_of(qkv, b, h, T, C, NH);
      float* dq = dqkv + (hd.q - qkv);
      backward_head(dq, dq + C, dq + 2 * C, dout + size_t(b) * T * C + size_t(h) * hd.hd, size_t(C),
                    att + (size_t(b) * NH + h) * T * T, hd, T, d.row_tokens + size_t(b) * T,
                    d.head_offset + h, d, factor, d_att);
    }
  }
}

}  // namespace mt
