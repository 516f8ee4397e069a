// A linear layer's bias gradient: dbias (OC) += the column sums of dout (N, OC), fp32 sums of
// fp32 or bf16 values. Each column's sum starts at 0, adds the rows in order n = 0 .. N-1 and
// is then added to dbias: the same bits at every thread count and in either layout below.
#pragma once

#include "kernels/bf16.h"

namespace mt {

// dbias (OC) += sum over n of dout (N, OC).
void bias_grad_add(float* dbias, const float* dout, int N, int OC);
void bias_grad_add(float* dbias, const bf16* dout, int N, int OC);

}  // namespace mt
