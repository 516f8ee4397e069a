// The grouped GEMMs' drivers (internal to grouped_gemm.cpp): each runs a whole Problem on
// its micro-kernels, where the CPU (and the build) has them.
#pragma once

#include "kernels/bf16.h"
#include "kernels/grouped_gemm_work.h"

namespace mt::grouped {

// fp32 on AVX-512 FMA (grouped_gemm_fp32.cpp): 12 x 32 register tiles, K in chunks of 256.
bool fp32_kernels_available();
void run_fp32(const Problem<float>& p);

// bf16 on AMX tiles (grouped_gemm_amx.cpp): 32 x 32 blocks, the whole K per block.
// Available where amx::available() (kernels/amx_tiles.h).
void run_amx(const Problem<bf16>& p);
// The same with SwiGLU applied to each block as it leaves the tiles (p.swiglu > 0, a
// multiple of 16; grouped_gemm_swiglu.cpp's calls).
void run_amx_swiglu(const Problem<bf16>& p);

// bf16 on AVX512-BF16 dot products (grouped_gemm_avx512_bf16.cpp): 12 x 32 register tiles.
bool avx512_bf16_available();
void run_avx512_bf16(const Problem<bf16>& p);

// Plain C++ loops (grouped_gemm_portable.cpp): any CPU.
void run_portable(const Problem<float>& p);
void run_portable(const Problem<bf16>& p);

// The per-group loop of matmul.h / matmul_bf16.h calls (grouped_gemm_loop.cpp).
void run_loop(const Problem<float>& p);
void run_loop(const Problem<bf16>& p);

}  // namespace mt::grouped
