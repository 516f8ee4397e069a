#include "kernels/sized_gemm.h"

#include <algorithm>

#include "core/timer.h"
#include "kernels/matmul.h"

namespace mt {

SizedGemm::SizedGemm(int k)
    : k_(k), a_(size_t(kDim) * k, 0.5f), b_(size_t(k) * kDim, 0.25f), c_(size_t(kDim) * kDim) {}

void SizedGemm::run() {
  sgemm(false, false, kDim, kDim, k_, 1.f, a_.data(), k_, b_.data(), kDim, 0.f, c_.data(), kDim);
}

std::string SizedGemm::describe() const {
  return "GEMM " + std::to_string(kDim) + "x" + std::to_string(kDim) + "x" + std::to_string(k_);
}

int SizedGemm::k_for(double target_us) {
  SizedGemm probe(512);
  probe.run();
  std::vector<double> t;
  for (int i = 0; i < 9; ++i) {
    Stopwatch sw;
    probe.run();
    t.push_back(sw.elapsed());
  }
  std::sort(t.begin(), t.end());
  const double k = 512 * target_us * 1e-6 / t[t.size() / 2];
  return std::clamp(int(k / 16) * 16, 16, 1 << 16);
}

}  // namespace mt
