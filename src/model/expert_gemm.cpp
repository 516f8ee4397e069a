#include "model/expert_gemm.h"

namespace mt {

void expert_gemm_forward(float* y, const float* x, const std::vector<Linear>& w,
                         const ExpertGroups& g, bool with_bias) {
  for (int le = 0; le < g.count; ++le) {
    const int rows = g.rows(le);
    if (rows == 0) continue;
    const size_t o = size_t(g.begin(le));
    w[le].forward(y + o * w[le].out, x + o * w[le].in, rows, with_bias);
  }
}

void expert_gemm_backward_input(float* dx, const float* dy, const std::vector<Linear>& w,
                                const ExpertGroups& g) {
  for (int le = 0; le < g.count; ++le) {
    const int rows = g.rows(le);
    if (rows == 0) continue;
    const size_t o = size_t(g.begin(le));
    w[le].backward_input(dx + o * w[le].in, dy + o * w[le].out, rows);
  }
}

void expert_gemm_backward_weight(const std::vector<Linear>& w, const float* dy, const float* x,
                                 const ExpertGroups& g, bool with_bias) {
  for (int le = 0; le < g.count; ++le) {
    const int rows = g.rows(le);
    if (rows == 0) continue;
    const size_t o = size_t(g.begin(le));
    w[le].backward_weight(dy + o * w[le].out, x + o * w[le].in, rows, with_bias);
  }
}

}  // namespace mt
