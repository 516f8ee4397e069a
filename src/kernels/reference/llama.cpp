// Naive twins of the Llama kernels (rmsnorm.h, swiglu.h, rope.h): double accumulation, one
// element at a time, written from the formulas in the headers.
#include <cmath>
#include <cstddef>

#include "kernels/reference/reference.h"

namespace mt::ref {

namespace {
double sigmoid(double g) {
  return 1.0 / (1.0 + std::exp(-g));
}
}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
  for (int n = 0; n < N; n++) {
    const float* x = inp + size_t(n) * C;
    double sq = 0;
    for (int c = 0; c < C; c++) sq += double(x[c]) * x[c];
    const double s = 1.0 / std::sqrt(sq / C + eps);
    for (int c = 0; c < C; c++) out[size_t(n) * C + c] = float(weight[c] * (x[c] * s));
    rstd[n] = float(s);
  }
}

void rmsnorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                            const float* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float* x = inp + size_t(n) * C;
    const float* dy = dout + size_t(n) * C;
    const double s = rstd[n];
    double mgx = 0;
    for (int c = 0; c < C; c++) mgx += double(dy[c]) * weight[c] * x[c] * s;
    mgx /= C;
    for (int c = 0; c < C; c++)
      dinp[size_t(n) * C + c] += float((double(dy[c]) * weight[c] - x[c] * s * mgx) * s);
  }
}

void rmsnorm_backward_weight(float* dweight, const float* dout, const float* inp, const float* rstd,
                             int N, int C) {
  for (int c = 0; c < C; c++) {
    double dw = 0;
    for (int n = 0; n < N; n++)
      dw += double(dout[size_t(n) * C + c]) * inp[size_t(n) * C + c] * rstd[n];
    dweight[c] += float(dw);
  }
}

void swiglu_forward(float* out, const float* gu, int N, int F) {
  for (int n = 0; n < N; n++)
    for (int i = 0; i < F; i++) {
      const double g = gu[size_t(n) * 2 * F + i], u = gu[size_t(n) * 2 * F + F + i];
      out[size_t(n) * F + i] = float(g * sigmoid(g) * u);
    }
}

void swiglu_backward(float* dgu, const float* gu, const float* dout, int N, int F,
                     bool accumulate) {
  for (int n = 0; n < N; n++)
    for (int i = 0; i < F; i++) {
      const size_t at = size_t(n) * 2 * F + i;
      const double g = gu[at], u = gu[at + F], s = sigmoid(g), d = dout[size_t(n) * F + i];
      const double dg = d * u * (s + g * s * (1 - s)), du = d * g * s;
      dgu[at] = float(dg + (accumulate ? dgu[at] : 0.0));
      dgu[at + F] = float(du + (accumulate ? dgu[at + F] : 0.0));
    }
}

namespace {
// Rotates (sign +1) or rotates back (sign -1) every head vector of every row.
void rope_rows(float* x, int rows, size_t row_stride, int heads, int T, const int* positions,
               const RopeTable& t, double sign) {
  const int half = t.half();
  for (int r = 0; r < rows; r++) {
    const int p = positions ? positions[r % T] : r % T;
    for (int h = 0; h < heads; h++) {
      float* v = x + size_t(r) * row_stride + size_t(h) * 2 * half;
      for (int i = 0; i < half; i++) {
        const double c = t.cos(p)[i], sn = sign * t.sin(p)[i], a = v[i], b = v[i + half];
        v[i] = float(a * c - b * sn);
        v[i + half] = float(b * c + a * sn);
      }
    }
  }
}
}  // namespace

void rope_forward(float* x, int rows, size_t row_stride, int heads, int T, const int* positions,
                  const RopeTable& table) {
  rope_rows(x, rows, row_stride, heads, T, positions, table, 1.0);
}

void rope_backward(float* dx, int rows, size_t row_stride, int heads, int T, const int* positions,
                   const RopeTable& table) {
  rope_rows(dx, rows, row_stride, heads, T, positions, table, -1.0);
}

}  // namespace mt::ref
