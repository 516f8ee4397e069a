#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/reference/reference.h"

namespace mt::ref {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;
    double m = 0.0, var = 0.0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    var /= C;
    double s = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; c++)
      out[static_cast<size_t>(n) * C + c] =
          static_cast<float>((x[c] - m) * s * weight[c] + bias[c]);
    mean[n] = static_cast<float>(m);
    rstd[n] = static_cast<float>(s);
  }
}

void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                              const float* mean, const float* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;
    const float* dy = dout + static_cast<size_t>(n) * C;
    double mg = 0.0, mgx = 0.0;
    for (int c = 0; c < C; c++) {
      double xhat = (x[c] - static_cast<double>(mean[n])) * rstd[n];
      mg += static_cast<double>(dy[c]) * weight[c];
      mgx += static_cast<double>(dy[c]) * weight[c] * xhat;
    }
    mg /= C;
    mgx /= C;
    for (int c = 0; c < C; c++) {
      double xhat = (x[c] - static_cast<double>(mean[n])) * rstd[n];
      double g = static_cast<double>(dy[c]) * weight[c];
      dinp[static_cast<size_t>(n) * C + c] += static_cast<float>((g - mg - xhat * mgx) * rstd[n]);
    }
  }
}

void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int N, int C) {
  for (int c = 0; c < C; c++) {
    double dw = 0.0, db = 0.0;
    for (int n = 0; n < N; n++) {
      double xhat = (inp[static_cast<size_t>(n) * C + c] - static_cast<double>(mean[n])) * rstd[n];
      dw += dout[static_cast<size_t>(n) * C + c] * xhat;
      db += dout[static_cast<size_t>(n) * C + c];
    }
    dweight[c] += static_cast<float>(dw);
    dbias[c] += static_cast<float>(db);
  }
}

}  // namespace mt::ref
