// The dense bf16 linears' AMX tile driver (internal to dense_gemm_bf16.cpp): one GEMM
//   C (M, N) [+]= A (M, K) @ B,   B a weight packed whole (grouped_gemm_prepack's layout)
// with its epilogue in the tiles and their stores rather than in passes of its own over C:
//  - bias: the accumulator tiles start from the bias, loaded with a row stride of 0, and the
//    products add onto it: no write of the bias rows before the GEMM, no read-modify-write
//    after it;
//  - gelu (the forward of the GPT MLP's fc): C is the pre-activation, which the backward
//    reads, and once a 32-row block's columns are in (L1/L2) act = bf16(gelu(C)) from it;
//  - dgelu (the input gradient of the MLP's projection): the product never goes to memory;
//    each 32-row block lands in a per-thread stage and act = bf16(gelu'(pre) * product).
// The tiles are those of the grouped GEMM's AMX kernel (grouped_gemm_amx.cpp): a 32 x 32
// block of C in four tiles over the whole K, summed in steps of 32 in order from zero, C or
// the bias, so a row's bits depend on that row only (not on the row count, the block it fell
// in or the team) and equal the grouped kernel's for the same start. The work is split in
// two dimensions over the team: blocks of columns whose packed panels fit in L2, and chunks
// of 32-row blocks.
#pragma once

#include <cstdint>

#include "kernels/bf16.h"

namespace mt::dense_amx {

enum class Epilogue { none, gelu, dgelu };

struct Gemm {
  const bf16* a = nullptr;      // (M, K) row-major
  const uint32_t* b = nullptr;  // B (K, N) as pair panels (GroupedPack's layout)
  int M = 0, K = 0, N = 0;
  float* c = nullptr;           // none, gelu: (M, N), the result (gelu: the pre-activation)
  bool accumulate = false;      // none: C += the product (C read into the tiles)
  const float* bias = nullptr;  // none, gelu: (N) added in the tiles, or null
  Epilogue epilogue = Epilogue::none;
  bf16* act = nullptr;         // gelu: bf16(gelu(C)); dgelu: bf16(gelu'(pre) * product), (M, N)
  const float* pre = nullptr;  // dgelu: (M, N)
};

// Needs amx::available(); runs on the calling rank's OpenMP team.
void run(const Gemm& g);

}  // namespace mt::dense_amx
