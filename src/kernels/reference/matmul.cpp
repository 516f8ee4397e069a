#include <cstddef>

#include "kernels/reference/reference.h"

namespace mt::ref {

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) {
      double acc = 0.0;
      for (int k = 0; k < K; k++) {
        double a =
            trans_a ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
        double b =
            trans_b ? B[static_cast<size_t>(j) * ldb + k] : B[static_cast<size_t>(k) * ldb + j];
        acc += a * b;
      }
      float& c = C[static_cast<size_t>(i) * ldc + j];
      c = static_cast<float>(alpha * acc + (beta == 0.0f ? 0.0 : static_cast<double>(beta) * c));
    }
  }
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  for (int n = 0; n < N; n++) {
    for (int o = 0; o < OC; o++) {
      double acc = bias ? bias[o] : 0.0;
      for (int c = 0; c < C; c++)
        acc += static_cast<double>(inp[static_cast<size_t>(n) * C + c]) *
               weight[static_cast<size_t>(o) * C + c];
      out[static_cast<size_t>(n) * OC + o] = static_cast<float>(acc);
    }
  }
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int C,
                           int OC) {
  for (int n = 0; n < N; n++) {
    for (int c = 0; c < C; c++) {
      double acc = 0.0;
      for (int o = 0; o < OC; o++)
        acc += static_cast<double>(dout[static_cast<size_t>(n) * OC + o]) *
               weight[static_cast<size_t>(o) * C + c];
      dinp[static_cast<size_t>(n) * C + c] += static_cast<float>(acc);
    }
  }
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int N, int C, int OC) {
  for (int o = 0; o < OC; o++) {
    for (int c = 0; c < C; c++) {
      double acc = 0.0;
      for (int n = 0; n < N; n++)
        acc += static_cast<double>(dout[static_cast<size_t>(n) * OC + o]) *
               inp[static_cast<size_t>(n) * C + c];
      dweight[static_cast<size_t>(o) * C + c] += static_cast<float>(acc);
    }
    if (dbias) {
      double acc = 0.0;
      for (int n = 0; n < N; n++) acc += dout[static_cast<size_t>(n) * OC + o];
      dbias[o] += static_cast<float>(acc);
    }
  }
}

}  // namespace mt::ref
