#include "kernels/matmul.h"
#include "kernels/phase_profile.h"

#include <oneapi/dnnl/dnnl.h>

#include "core/error.h"
#include "kernels/bias_grad.h"
#include "kernels/matmul_weight_grad.h"

namespace mt {

// dnnl_sgemm rather than a cached matmul primitive: measured on the dim-256/512 model
// shapes (M = 1024 rows, K and N 256..2048) both reach the same ~100 GFLOP/s per core, and
// the plain call needs no per-shape cache (which would be shared state across ranks).
// oneDNN threads it with OpenMP using the calling thread's omp_get_max_threads(), and runs
// it single-threaded when called inside a parallel region (attention relies on that).
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
  PhaseScope phase_scope(Phase::gemm, 2.0 * M * N * K,
                         4.0 * (double(M) * K + double(K) * N + double(M) * N));
  if (M == 0 || N == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B,
                                ldb, beta, C, ldc);
  MT_CHECK(st == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(st), " (M=", M,
           " N=", N, " K=", K, ")");
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  PhaseScope phase_scope(Phase::gemm, 2.0 * N * C * OC,
                         4.0 * (double(N) * C + double(OC) * C + double(N) * OC));
  // out is (N, OC). Writing the bias first and letting the GEMM accumulate (beta = 1) costs one
  // write-only pass, cheaper than a read-modify-write bias pass after it.
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
      float* row = out + static_cast<size_t>(n) * OC;
#pragma omp simd
      for (int o = 0; o < OC; o++) row[o] = bias[o];
    }
    beta = 1.0f;
  }
  sgemm(false, true, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int C,
                           int OC, bool accumulate) {
  PhaseScope phase_scope(
      Phase::gemm, 2.0 * N * C * OC,
      4.0 * (double(N) * C * (accumulate ? 2 : 1) + double(OC) * C + double(N) * OC));
  // dinp (N, C) (+)= dout (N, OC) @ weight (OC, C). beta 0 gives the bits of beta 1 onto
  // zeros: the kernel's first store of an element is 0 + sum (or the sum itself, which
  // starts from a zeroed accumulator and so is never -0), and later K blocks add to it.
  sgemm(false, false, N, C, OC, 1.0f, dout, OC, weight, C, accumulate ? 1.0f : 0.0f, dinp, C);
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int N, int C, int OC) {
  PhaseScope phase_scope(Phase::gemm, 2.0 * N * C * OC,
                         4.0 * (double(N) * C + double(OC) * C * 2 + double(N) * OC));
  if (fp32_weight_grad_transposed(C, OC) && N > 0) {
    matmul_backward_weight_transposed(dweight, dout, inp, N, C, OC);
  } else {
    // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
    sgemm(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  }
  if (dbias) bias_grad_add(dbias, dout, N, OC);
}

}  // namespace mt
