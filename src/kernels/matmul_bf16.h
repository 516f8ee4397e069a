// The linear layer's forward / backward pair with bf16 GEMM inputs (--precision bf16,
// docs/precision.md): oneDNN's matmul primitive multiplies bf16 operands, accumulates in
// fp32 and writes fp32. oneDNN picks the instructions itself (AVX512-BF16 dot products, or
// AMX tiles where the CPU has them); matmul_bf16_isa() says which it picked.
// Same shapes and accumulation rules as kernels/matmul.h: backward functions accumulate (+=).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/bf16.h"

namespace mt {

// out (N, OC) = inp (N, C) @ weight^T (OC, C) + bias (OC), fp32 out. bias may be null.
void matmul_bf16_forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                         int C, int OC);

// dinp (N, C) += dout (N, OC) @ weight (OC, C); with accumulate false, dinp = (overwrites:
// the tensor-parallel layers' partial sums start from nothing, and a memset plus reading
// dinp back would cost as much memory traffic as the conversions of a block).
void matmul_bf16_backward_input(float* dinp, const bf16* dout, const bf16* weight, int N, int C,
                                int OC, bool accumulate = true);

// dweight (OC, C) += dout^T (OC, N) @ inp (N, C);  dbias (OC) += column sums of dout (fp32
// sums of the bf16 values). dbias may be null.
void matmul_bf16_backward_weight(float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                 int N, int C, int OC);

// dst (cols, rows) = src (rows, cols)^T, row-major both (any sizes).
void bf16_transpose(bf16* dst, const bf16* src, int64_t rows, int64_t cols);

// The row counts a GEMM of `rows` output rows runs as, in order (their sum is `rows`): the
// forward and input-gradient GEMMs split their rows this way so that the shapes, and the
// oneDNN primitives cached per shape, stay few per layer whatever the row count. A row of
// the output is the same bits whichever piece it ran in.
std::vector<int64_t> matmul_bf16_row_pieces(int64_t rows);

// How many oneDNN primitives this thread keeps (one per GEMM shape it has run). Bounded per
// family of shapes: row counts run as at most 64-row multiples plus power-of-two pieces.
size_t matmul_bf16_cached_primitives();

// Whether this CPU runs oneDNN's bf16 matmul at all (it needs AVX512 at least; oneDNN 2.6
// has no bf16 path for AVX2 machines). Checked before any rank starts.
bool bf16_matmul_supported();

// oneDNN's implementation name for a representative bf16 matmul on this machine, e.g.
// "brg:avx512_core_bf16" or "brg:avx512_core_amx" (what DNNL_VERBOSE would print), or
// "unsupported".
std::string matmul_bf16_isa();

}  // namespace mt
