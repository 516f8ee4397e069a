// The grouped GEMMs with SwiGLU in their store (grouped_gemm.h, *_swiglu): the AMX driver
// where it runs (grouped_gemm_amx.cpp, run_amx_swiglu), else the unfused composition.
#include <vector>

#include "core/error.h"
#include "kernels/grouped_gemm.h"
#include "kernels/grouped_gemm_kernels.h"
#include "kernels/phase_profile.h"
#include "kernels/swiglu.h"

namespace mt {

namespace {

using grouped::Problem;
using grouped::Product;
using grouped::rows_problem;

constexpr int kUnits = 16;  // hidden units of one AMX column tile

// The rows of the groups: the composition's activation runs over them.
int row_count(const int32_t* offset, int groups) {
  return offset[groups] - offset[0];
}

}  // namespace

bool grouped_bf16_fuses_swiglu(int H) {
  return H > 0 && H % kUnits == 0 && grouped_gemm_path(true) == GroupedGemmPath::amx;
}

size_t grouped_bf16_swiglu_scratch_bytes(int H) {
  // grouped_gemm_amx.cpp's row_block_stage: one C block's rows (kBlock, amx_tiles.h,
  // asserted there) of an item's columns, which are at most all H of them.
  constexpr size_t kBlockRows = 32;
  return H > 0 ? kBlockRows * size_t(H) * sizeof(float) : 0;
}

void grouped_matmul_bf16_forward_swiglu(float* gu, bf16* act, const bf16* inp,
                                        const bf16* const* weight, const int32_t* offset,
                                        int groups, int C, int H, const uint32_t* const* packed) {
  if (!grouped_bf16_fuses_swiglu(H)) {
    grouped_matmul_bf16_forward(gu, inp, weight, offset, groups, C, 2 * H, packed);
    const size_t r0 = size_t(offset[0]);
    swiglu_forward_bf16(act + r0 * H, gu + r0 * 2 * H, row_count(offset, groups), H);
    return;
  }
  const double rows = row_count(offset, groups);
  // The fused call's phase: the GEMM's FLOPs; bytes: its operands once, gu and act written.
  PhaseScope phase(Phase::gemm, 2.0 * rows * C * 2 * H,
                   rows * (C * 2.0 + H * 2.0 * 4 + H * 2.0) + double(groups) * C * 2 * H * 2.0);
  Problem<bf16> p =
      rows_problem(Product::forward, gu, inp, weight, offset, groups, C, 2 * H, false, packed);
  p.swiglu = H, p.act = act, p.gu = gu;
  grouped::run_amx_swiglu(p);
}

void grouped_matmul_bf16_backward_input_swiglu(bf16* dgu, const float* gu, const bf16* dout,
                                               const bf16* const* weight, const int32_t* offset,
                                               int groups, int H, int OC,
                                               const uint32_t* const* packed) {
  const size_t r0 = size_t(offset[0]);
  const int rows = row_count(offset, groups);
  if (!grouped_bf16_fuses_swiglu(H)) {
    std::vector<float> d_act(size_t(offset[groups]) * H);
    grouped_matmul_bf16_backward_input(d_act.data(), dout, weight, offset, groups, H, OC, false,
                                       packed);
    swiglu_backward_bf16(dgu + r0 * 2 * H, gu + r0 * 2 * H, d_act.data() + r0 * H, rows, H);
    return;
  }
  // The fused call's phase: the GEMM's FLOPs; bytes: its operands once, gu read, dgu written.
  PhaseScope phase(
      Phase::gemm, 2.0 * rows * H * OC,
      double(rows) * (OC * 2.0 + H * 2.0 * 4 + H * 2.0 * 2) + double(groups) * H * OC * 2.0);
  Problem<bf16> p = rows_problem(Product::backward_input, nullptr, dout, weight, offset, groups, H,
                                 OC, false, packed);
  p.swiglu = H, p.dgu = dgu, p.gu = gu;
  grouped::run_amx_swiglu(p);
}

}  // namespace mt
