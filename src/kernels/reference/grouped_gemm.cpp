#include <cstddef>

#include "kernels/reference/grouped_gemm_ref.h"

namespace mt::ref {

void grouped_matmul_forward(float* out, const float* inp, const float* const* weight,
                            const int32_t* offset, int groups, int C, int OC) {
  for (int g = 0; g < groups; ++g)
    for (int n = offset[g]; n < offset[g + 1]; ++n)
      for (int o = 0; o < OC; ++o) {
        double acc = 0.0;
        for (int c = 0; c < C; ++c)
          acc += double(inp[size_t(n) * C + c]) * weight[g][size_t(o) * C + c];
        out[size_t(n) * OC + o] = float(acc);
      }
}

void grouped_matmul_backward_input(float* dinp, const float* dout, const float* const* weight,
                                   const int32_t* offset, int groups, int C, int OC,
                                   bool accumulate) {
  for (int g = 0; g < groups; ++g)
    for (int n = offset[g]; n < offset[g + 1]; ++n)
      for (int c = 0; c < C; ++c) {
        double acc = accumulate ? double(dinp[size_t(n) * C + c]) : 0.0;
        for (int o = 0; o < OC; ++o)
          acc += double(dout[size_t(n) * OC + o]) * weight[g][size_t(o) * C + c];
        dinp[size_t(n) * C + c] = float(acc);
      }
}

void grouped_matmul_backward_weight(float* const* dweight, const float* dout, const float* inp,
                                    const int32_t* offset, int groups, int C, int OC) {
  for (int g = 0; g < groups; ++g) {
    if (offset[g] == offset[g + 1]) continue;  // a group of no rows leaves its gradient alone
    for (int o = 0; o < OC; ++o)
      for (int c = 0; c < C; ++c) {
        double acc = dweight[g][size_t(o) * C + c];
        for (int n = offset[g]; n < offset[g + 1]; ++n)
          acc += double(dout[size_t(n) * OC + o]) * inp[size_t(n) * C + c];
        dweight[g][size_t(o) * C + c] = float(acc);
      }
  }
}

}  // namespace mt::ref
