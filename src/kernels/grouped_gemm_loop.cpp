// The grouped GEMMs as one matmul.h / matmul_bf16.h call per group with rows: the fallback
// where the CPU or the build lacks the micro-kernels, and the baseline they are measured
// against.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/grouped_gemm_kernels.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"

namespace mt::grouped {

namespace {

// The weight gradient's K is a group's row count: oneDNN's matmul primitive is built (and
// cached) per shape, so rows run as whole multiples of kRowQuantum, the last one padded
// with zero rows (which add nothing), as the experts of model/expert_mlp_bf16.h do.
constexpr int kRowQuantum = 64;

void backward_weight_bf16(float* dw, const bf16* dout, const bf16* inp, int rows, int C, int OC) {
  const int whole = rows / kRowQuantum * kRowQuantum;
  if (whole > 0) matmul_bf16_backward_weight(dw, nullptr, dout, inp, whole, C, OC);
  const int rest = rows - whole;
  if (rest == 0) return;
  thread_local std::vector<bf16> pad;
  pad.assign(size_t(kRowQuantum) * (C + OC), 0);
  bf16* d = pad.data();
  bf16* x = d + size_t(kRowQuantum) * OC;
  std::memcpy(d, dout + size_t(whole) * OC, size_t(rest) * OC * sizeof(bf16));
  std::memcpy(x, inp + size_t(whole) * C, size_t(rest) * C * sizeof(bf16));
  matmul_bf16_backward_weight(dw, nullptr, d, x, kRowQuantum, C, OC);
}

}  // namespace

void run_loop(const Problem<float>& p) {
  const size_t C = size_t(p.C), OC = size_t(p.OC);
  for (int g = 0; g < p.groups; ++g) {
    const int rows = p.offset[g + 1] - p.offset[g];
    const size_t r0 = size_t(p.offset[g]);
    if (rows == 0) continue;
    switch (p.product) {
      case Product::forward:
        matmul_forward(p.out + r0 * OC, p.rows + r0 * C, p.weight[g], nullptr, rows, p.C, p.OC);
        break;
      case Product::backward_input:
        sgemm(false, false, rows, p.C, p.OC, 1.0f, p.rows + r0 * OC, p.OC, p.weight[g], p.C,
              p.accumulate ? 1.0f : 0.0f, p.out + r0 * C, p.C);
        break;
      case Product::backward_weight:
        matmul_backward_weight(p.dweight[g], nullptr, p.rows + r0 * OC, p.inp + r0 * C, rows, p.C,
                               p.OC);
        break;
    }
  }
}

void run_loop(const Problem<bf16>& p) {
  const size_t C = size_t(p.C), OC = size_t(p.OC);
  for (int g = 0; g < p.groups; ++g) {
    const int rows = p.offset[g + 1] - p.offset[g];
    const size_t r0 = size_t(p.offset[g]);
    if (rows == 0) continue;
    switch (p.product) {
      case Product::forward:
        matmul_bf16_forward(p.out + r0 * OC, p.rows + r0 * C, p.weight[g], nullptr, rows, p.C,
                            p.OC);
        break;
      case Product::backward_input:
        matmul_bf16_backward_input(p.out + r0 * C, p.rows + r0 * OC, p.weight[g], rows, p.C, p.OC,
                                   p.accumulate);
        break;
      case Product::backward_weight:
        backward_weight_bf16(p.dweight[g], p.rows + r0 * OC, p.inp + r0 * C, rows, p.C, p.OC);
        break;
    }
  }
}

}  // namespace mt::grouped
