// The linear layer's forward / backward pair with bf16 GEMM inputs (--precision bf16,
// docs/precision.md): oneDNN multiplies bf16 operands, accumulates in fp32 and writes fp32.
// Two oneDNN routines can run it (Bf16GemmPath); the default is picked from the CPU at run
// time, and matmul_bf16_isa() names the kernel that runs.
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

// The bytes of scratch the calling thread keeps after matmul_bf16_backward_weight of N rows:
// on the primitive path a layer with OC <= C multiplies a transposed bf16 copy of dout
// (N, OC), kept thread_local and only grown (so a thread keeps the largest of its calls');
// the other paths read dout as it is and keep nothing.
size_t matmul_bf16_weight_grad_scratch_bytes(int N, int C, int OC);
// The same on any CPU: the most a path keeps, the primitive's copy (the path AMX CPUs and CPUs
// without the JIT routine take by default; Bf16GemmPath below). A local plan counts this for
// its profile's CPU, which the profile does not tell apart (model/kernel_target.h).
size_t matmul_bf16_weight_grad_scratch_bytes_any_cpu(int N, int C, int OC);

// dst (cols, rows) = src (rows, cols)^T, row-major both (any sizes).
void bf16_transpose(bf16* dst, const bf16* src, int64_t rows, int64_t cols);

// The row counts a GEMM of `rows` output rows runs as, in order (their sum is `rows`): the
// forward and input-gradient GEMMs split their rows this way so that the shapes, and the
// oneDNN primitives cached per shape, stay few per layer whatever the row count. Whether a
// row's bits depend on its piece's size depends on the kernel oneDNN runs the piece on
// (docs/precision.md, "Row pieces and bits"): not with AVX512-BF16 and without AMX; with
// AMX, yes (small pieces run another kernel, and K is summed in chunks that follow the row
// blocking); on the jit_gemm path, yes (1-row pieces run a gemv kernel; on mixed, those
// without a bias). All paths split
// the same way, so the planner's cost of a row count holds for both.
std::vector<int64_t> matmul_bf16_row_pieces(int64_t rows);

// How many oneDNN primitives this thread keeps (one per GEMM shape it has run). Bounded per
// family of shapes: row counts run as at most 64-row multiples plus power-of-two pieces.
size_t matmul_bf16_cached_primitives();

// The oneDNN routines a bf16 GEMM can take (two routines, and one mix of them):
//  - primitive: the matmul primitive (brgemm kernels: AVX512-BF16 dot products, or AMX
//    tiles where the CPU has them), one primitive cached per shape and thread;
//  - jit_gemm: the gemm_bf16bf16f32 routine, the bf16 sibling of the sgemm the fp32 layers
//    run (AVX512-BF16 dot products; no AMX). Faster than the primitive on AVX512-BF16
//    without AMX at d512 (weight gradients above all), not exported in oneDNN's public
//    headers, so it is found at run time and the primitive stays the fallback;
//  - mixed: jit_gemm, except a forward GEMM with a bias (and no accumulation), which the
//    primitive runs with the bias added in its epilogue: the gemm routine has no bias, so on
//    jit_gemm the bias is first copied into every output row and the product accumulated
//    onto it (a write and a read of the output more). The default on AVX512-BF16 without
//    AMX: measured there (1 thread, 512 and 1024 rows, d256 and d512 layers, alternated)
//    the primitive's forward with its bias ran 0-8% ahead of the routine's with the copy,
//    while the routine kept its lead on the weight gradients (13-27% at d512) and tied or
//    led on the input gradients, so only the forwards with a bias move (docs/kernels.md).
// All accumulate in fp32 and round nothing but their inputs, so the bounds in
// tests/kernels/test_bf16.cpp hold for all; their bits differ (other summation orders).
enum class Bf16GemmPath { primitive, jit_gemm, mixed };

// The routine this CPU's GEMMs take by default, and the one they take now; and whether a
// forward GEMM with a bias takes the primitive now (primitive and mixed).
Bf16GemmPath matmul_bf16_default_path();
Bf16GemmPath matmul_bf16_path();
bool matmul_bf16_bias_on_primitive();
bool matmul_bf16_path_available(Bf16GemmPath path);

// Overrides the routine for the whole process while it lives (tests and bench_step compare
// them; training never sets it).
class ScopedBf16GemmPath {
 public:
  explicit ScopedBf16GemmPath(Bf16GemmPath path);
  ~ScopedBf16GemmPath();
  ScopedBf16GemmPath(const ScopedBf16GemmPath&) = delete;
  ScopedBf16GemmPath& operator=(const ScopedBf16GemmPath&) = delete;

 private:
  int saved_;
};

// Whether this CPU runs oneDNN's bf16 matmul at all (it needs AVX512 at least; oneDNN 2.6
// has no bf16 path for AVX2 machines). Checked before any rank starts.
bool bf16_matmul_supported();

// The kernel the bf16 GEMMs run on this machine: on the primitive path oneDNN's
// implementation name for a representative matmul, e.g. "brg:avx512_core_bf16" or
// "brg:avx512_core_amx_bf16" (what DNNL_VERBOSE would print; "gemm:jit" where the CPU has
// AVX-512 but not AVX512-BF16); on the jit_gemm and mixed paths
// "gemm:jit:avx512_core_bf16" (the routine of most of their FLOPs, and of the GEMM peak's
// square products, which have no bias); or "unsupported".
std::string matmul_bf16_isa();

}  // namespace mt
