// Linear layer as a forward / backward pair, GEMMs through oneDNN (row-major sgemm).
// Backward is split in two so a pipeline schedule can run the input gradient (B) now and
// the weight gradient (W) later (zero-bubble schedules). Backward functions accumulate (+=).
#pragma once

namespace mt {

// out (N, OC) = inp (N, C) @ weight^T (OC, C) + bias (OC). bias may be null.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC);

// dinp (N, C) += dout (N, OC) @ weight (OC, C).
// accumulate false: dinp = the product (overwritten, sgemm beta 0), bitwise a memset of dinp
// followed by the accumulating call, without the memset's write pass (tests/kernels/
// test_backward_overwrite.cpp pins that for the engine's shapes).
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int C,
                           int OC, bool accumulate = true);

// dweight (OC, C) += dout^T (OC, N) @ inp (N, C);  dbias (OC) += sum over N of dout.
// dbias may be null.
void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int N, int C, int OC);

// Plain row-major GEMM used by the layers above and by attention:
// C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C, op = transpose when trans_* is set.
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

}  // namespace mt
