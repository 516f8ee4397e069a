#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/reference/reference.h"

namespace mt::ref {

namespace {
// Element (b, t, part, h, d) of a (B, T, 3C) buffer; part 0/1/2 = q/k/v.
size_t qkv_at(int b, int t, int part, int h, int d, int T, int C, int hd) {
  return (static_cast<size_t>(b) * T + t) * 3 * C + static_cast<size_t>(part) * C + h * hd + d;
}
}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  int hd = C / NH;
  double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> p(T);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;
      for (int i = 0; i < T; i++) {
        double m = -INFINITY;
        for (int j = 0; j <= i; j++) {
          double s = 0.0;
          for (int d = 0; d < hd; d++)
            s += static_cast<double>(qkv[qkv_at(b, i, 0, h, d, T, C, hd)]) *
                 qkv[qkv_at(b, j, 1, h, d, T, C, hd)];
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        double sum = 0.0;
        for (int j = 0; j <= i; j++) sum += (p[j] = std::exp(p[j] - m));
        for (int j = 0; j < T; j++)
          a[static_cast<size_t>(i) * T + j] = j <= i ? static_cast<float>(p[j] / sum) : 0.0f;
        for (int d = 0; d < hd; d++) {
          double o = 0.0;
          for (int j = 0; j <= i; j++) o += p[j] / sum * qkv[qkv_at(b, j, 2, h, d, T, C, hd)];
          out[(static_cast<size_t>(b) * T + i) * C + h * hd + d] = static_cast<float>(o);
        }
      }
    }
  }
}

void attention_backward(float* dqkv, float* /*scratch*/, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  int hd = C / NH;
  double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> datt(T), dpre(T);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;
      for (int i = 0; i < T; i++) {
        const float* dy = dout + (static_cast<size_t>(b) * T + i) * C + h * hd;
        double dot = 0.0;
        for (int j = 0; j <= i; j++) {
          double s = 0.0;
          for (int d = 0; d < hd; d++)
            s += static_cast<double>(dy[d]) * qkv[qkv_at(b, j, 2, h, d, T, C, hd)];
          datt[j] = s;
          dot += s * a[static_cast<size_t>(i) * T + j];
        }
        for (int j = 0; j <= i; j++)
          dpre[j] = a[static_cast<size_t>(i) * T + j] * (datt[j] - dot) * scale;
        for (int j = 0; j <= i; j++) {
          double aij = a[static_cast<size_t>(i) * T + j];
          for (int d = 0; d < hd; d++) {
            dqkv[qkv_at(b, i, 0, h, d, T, C, hd)] +=
                static_cast<float>(dpre[j] * qkv[qkv_at(b, j, 1, h, d, T, C, hd)]);
            dqkv[qkv_at(b, j, 1, h, d, T, C, hd)] +=
                static_cast<float>(dpre[j] * qkv[qkv_at(b, i, 0, h, d, T, C, hd)]);
            dqkv[qkv_at(b, j, 2, h, d, T, C, hd)] += static_cast<float>(aij * dy[d]);
          }
        }
      }
    }
  }
}

}  // namespace mt::ref
