// The bf16 forward's weight in the layout oneDNN's matmul primitive multiplies it in
// (--precision bf16 on AVX512-BF16 without AMX; docs/kernels.md, "The forward's blocked weight").
//
// Given a plain (row-major) weight, the primitive re-lays it into its own blocked layout on
// every call. Given the weight already blocked (format_tag::any resolved once, here
// BA16a64b2a), it reads it as it is: measured 2-8% faster forwards (d128-d512, 1 thread),
// and the same bits (the same kernel and summation order; tests/kernels/
// test_matmul_bf16_blocked.cpp). oneDNN's own reorder into that layout costs about what the
// forward saves when the weight serves one step (gemm43); block_weight below is a register
// transpose from the plain bf16 copy, about the cost of the fp32 -> bf16 conversion itself.
//
// The layout, for B = weight^T (K = C rows, N = OC columns): blocks of 32 K x 64 N,
// N-block major; inside a block 16 rows of K pairs, each 64 columns of (k, k + 1) pairs:
//   offset(k, n) = (n / 64) * Kp * 64 + (k / 32) * 2048 + (k % 32 / 2) * 128 + (n % 64) * 2 + k % 2
// with Kp = C rounded up to 32 and OC rounded up to 64; the padding holds zeros.
#pragma once

#include <cstddef>

#include "kernels/bf16.h"

namespace mt {

// The blocked copy's elements (with its padding), whatever the CPU.
size_t matmul_bf16_blocked_weight_size(int C, int OC);

// dst (matmul_bf16_blocked_weight_size) = weight (OC, C) in the layout above.
void matmul_bf16_block_weight(bf16* dst, const bf16* weight, int C, int OC);

}  // namespace mt
