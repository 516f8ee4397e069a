// The orientation of the fp32 weight gradient (kernels/matmul.h's matmul_backward_weight,
// dweight (OC, C) += dout^T (OC, N) @ inp (N, C)).
//
// Where OC >= 4 C (the MLP's fc) the product runs as dweight^T = inp^T @ dout into a
// per-thread (C, OC) scratch, then added transposed: measured at 1 thread on the AVX-512
// EPYC (stop 43, thread CPU time, alternated; docs/performance.md "Stop 43"), sgemm ran fc's
// weight gradient 14-22% faster that way at d256 and d512 (3% at d128); qkv's (OC = 3 C)
// came out from 12% faster to 3% slower, and OC <= C slower, so they keep the plain
// orientation. Only up to C x OC = 2^20 elements (4 MiB of scratch, d512's fc): larger layers
// (an LM head's vocabulary) keep the plain orientation and take no scratch. Its bits differ
// from the plain orientation's (another summation of the same products, fp32); every layout
// takes the same rule, a tp shard by its own OC and C.
#pragma once

#include <cstddef>

namespace mt {

// The rule above (by_shape, the default) or the plain orientation for every shape
// (tests and bench_linear_gemms compare them; training never sets it).
enum class Fp32WeightGradPath { by_shape, plain };
Fp32WeightGradPath fp32_weight_grad_path();
// Whether the gradient of a (OC, C) weight runs transposed now.
bool fp32_weight_grad_transposed(int C, int OC);
// The bytes of scratch the calling thread keeps after the gradient of a (OC, C) weight: the
// (C, OC) fp32 copy where the rule above takes the transposed orientation, else none. The
// buffer is thread_local and only grows, so a thread keeps the largest of its calls' (the
// memory estimate counts the largest linear of a rank, model/block.h).
size_t fp32_weight_grad_scratch_bytes(int C, int OC);

// dweight (OC, C) += (inp^T (C, N) @ dout (N, OC))^T: the transposed orientation's product
// (no dbias: matmul_backward_weight sums it either way).
void matmul_backward_weight_transposed(float* dweight, const float* dout, const float* inp, int N,
                                       int C, int OC);

class ScopedFp32WeightGradPath {
 public:
  explicit ScopedFp32WeightGradPath(Fp32WeightGradPath path);
  ~ScopedFp32WeightGradPath();
  ScopedFp32WeightGradPath(const ScopedFp32WeightGradPath&) = delete;
  ScopedFp32WeightGradPath& operator=(const ScopedFp32WeightGradPath&) = delete;

 private:
  int saved_;
};

}  // namespace mt
