#include "kernels/matmul_weight_grad.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace mt {

namespace {

std::atomic<int> wgrad_override{-1};

// dweight (OC, C) += scratch (C, OC)^T, in 16 x 16 blocks (both sides read and written a
// cache line at a time); the blocks of output rows are spread over the team.
void add_transposed(float* dweight, const float* scratch, int C, int OC) {
  constexpr int kBlock = 16;
#pragma omp parallel for schedule(static) if (int64_t(OC) * C >= (int64_t(1) << 18))
  for (int o0 = 0; o0 < OC; o0 += kBlock)
    for (int c0 = 0; c0 < C; c0 += kBlock) {
      const int o1 = std::min(OC, o0 + kBlock), c1 = std::min(C, c0 + kBlock);
      for (int o = o0; o < o1; ++o) {
        float* row = dweight + size_t(o) * C;
#pragma omp simd
        for (int c = c0; c < c1; ++c) row[c] += scratch[size_t(c) * OC + o];
      }
    }
}

}  // namespace

Fp32WeightGradPath fp32_weight_grad_path() {
  const int over = wgrad_override.load(std::memory_order_relaxed);
  return over < 0 ? Fp32WeightGradPath::by_shape : Fp32WeightGradPath(over);
}

ScopedFp32WeightGradPath::ScopedFp32WeightGradPath(Fp32WeightGradPath path)
    : saved_(wgrad_override.load()) {
  wgrad_override = int(path);
}

ScopedFp32WeightGradPath::~ScopedFp32WeightGradPath() {
  wgrad_override = saved_;
}

bool fp32_weight_grad_transposed(int C, int OC) {
  // The scratch is a whole (C, OC) fp32 copy of the gradient, kept by the calling thread for
  // its lifetime (counted once per rank by the memory estimate: fp32_weight_grad_scratch_bytes);
  // so the rule holds only up to the largest layer it was measured at (d512's fc, 4 MiB): an
  // LM head of a 50K vocabulary would keep 150 MiB.
  constexpr int64_t kMaxScratchFloats = int64_t(1) << 20;
  return fp32_weight_grad_path() == Fp32WeightGradPath::by_shape && OC >= 4 * int64_t(C) &&
         int64_t(C) * OC <= kMaxScratchFloats;
}

size_t fp32_weight_grad_scratch_bytes(int C, int OC) {
  return fp32_weight_grad_transposed(C, OC) ? size_t(C) * size_t(OC) * sizeof(float) : 0;
}

void matmul_backward_weight_transposed(float* dweight, const float* dout, const float* inp, int N,
                                       int C, int OC) {
  // dweight^T (C, OC) = inp^T (C, N) @ dout (N, OC) into the thread's scratch, then added
  // transposed onto dweight.
  thread_local std::vector<float> scratch;
  if (scratch.size() < size_t(C) * OC) scratch.resize(size_t(C) * OC);
  sgemm(true, false, C, OC, N, 1.0f, inp, C, dout, OC, 0.0f, scratch.data(), OC);
  add_transposed(dweight, scratch.data(), C, OC);
}

}  // namespace mt
