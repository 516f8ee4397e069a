// A GEMM of a chosen duration: the compute between two collectives in
// `bench comm --under-compute` (which sits in comm/, below kernels/, and gets it from the CLI).
#pragma once

#include <string>
#include <vector>

namespace mt {

class SizedGemm {
 public:
  static constexpr int kDim = 256;  // M = N; K sets the duration
  explicit SizedGemm(int k);
  // K for which one run takes about target_us on the calling thread (time is linear in K).
  static int k_for(double target_us);
  void run();
  std::string describe() const;  // "GEMM 256x256x208"

 private:
  int k_;
  std::vector<float> a_, b_, c_;
};

}  // namespace mt
