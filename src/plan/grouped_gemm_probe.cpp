// The grouped expert GEMMs of --calibrate (calibration_probes.h): the engine runs an MoE
// layer's experts as one grouped GEMM per matrix and pass (model/expert_gemm.h over
// kernels/grouped_gemm.h), on the path its CPU has (AMX, AVX512-BF16, AVX-512 or the oneDNN
// loop), not as a loop of one small GEMM per expert. Its rate is its own kernel's: neither
// the dense linears' sgemm / oneDNN figures nor their small-dimension penalty describe it
// (at the reference MoE shape the old per-expert bf16 formula gave more time than the whole
// layer took, leaving the layer's rest at its floor).
#include <array>
#include <cstdint>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/grouped_gemm.h"
#include "plan/calibration_probes.h"
#include "plan/calibration_timing.h"

namespace mt::plan {

namespace {

// The MoE rest's reference layer (kernel_probes.cpp): N 1024 tokens at top-2 = 2048 rows,
// evenly over 4 experts, C 256, hidden H 1024: both matrices (fc C -> H, proj H -> C) per
// pass, each pass 2 x 2 rows C H FLOPs, timed with the caches emptied first (a step's
// experts find their rows in memory, written by the dispatch before them).
constexpr int kExperts = 4, kRows = 2048, kC = 256, kH = 1024;

template <typename T>
struct GroupedProblem {
  std::vector<int32_t> offset;
  std::vector<T> x, act, dh, dc, wfc, wproj;      // operands: rows x C, rows x H; weights
  std::vector<float> h, c, dx, dact, gfc, gproj;  // results and weight gradients
  std::vector<const T*> fc, proj;
  std::vector<float*> dfc, dproj;

  explicit GroupedProblem(T one) {
    for (int e = 0; e <= kExperts; ++e) offset.push_back(e * kRows / kExperts);
    const size_t rc = size_t(kRows) * kC, rh = size_t(kRows) * kH, w = size_t(kC) * kH;
    x.assign(rc, one), dc.assign(rc, one), act.assign(rh, one), dh.assign(rh, one);
    wfc.assign(w * kExperts, one), wproj.assign(w * kExperts, one);
    h.resize(rh), c.resize(rc), dx.resize(rc), dact.resize(rh);
    gfc.assign(w * kExperts, 0), gproj.assign(w * kExperts, 0);
    for (int e = 0; e < kExperts; ++e) {
      fc.push_back(wfc.data() + size_t(e) * w), proj.push_back(wproj.data() + size_t(e) * w);
      dfc.push_back(gfc.data() + size_t(e) * w), dproj.push_back(gproj.data() + size_t(e) * w);
    }
  }
};

void forward(GroupedProblem<float>& p) {
  grouped_matmul_forward(p.h.data(), p.x.data(), p.fc.data(), p.offset.data(), kExperts, kC, kH);
  grouped_matmul_forward(p.c.data(), p.act.data(), p.proj.data(), p.offset.data(), kExperts, kH,
                         kC);
}
void forward(GroupedProblem<bf16>& p) {
  grouped_matmul_bf16_forward(p.h.data(), p.x.data(), p.fc.data(), p.offset.data(), kExperts, kC,
                              kH);
  grouped_matmul_bf16_forward(p.c.data(), p.act.data(), p.proj.data(), p.offset.data(), kExperts,
                              kH, kC);
}
void backward_input(GroupedProblem<float>& p) {
  grouped_matmul_backward_input(p.dx.data(), p.dh.data(), p.fc.data(), p.offset.data(), kExperts,
                                kC, kH, false);
  grouped_matmul_backward_input(p.dact.data(), p.dc.data(), p.proj.data(), p.offset.data(),
                                kExperts, kH, kC, false);
}
void backward_input(GroupedProblem<bf16>& p) {
  grouped_matmul_bf16_backward_input(p.dx.data(), p.dh.data(), p.fc.data(), p.offset.data(),
                                     kExperts, kC, kH, false);
  grouped_matmul_bf16_backward_input(p.dact.data(), p.dc.data(), p.proj.data(), p.offset.data(),
                                     kExperts, kH, kC, false);
}
void backward_weight(GroupedProblem<float>& p) {
  grouped_matmul_backward_weight(p.dfc.data(), p.dh.data(), p.x.data(), p.offset.data(), kExperts,
                                 kC, kH);
  grouped_matmul_backward_weight(p.dproj.data(), p.dc.data(), p.act.data(), p.offset.data(),
                                 kExperts, kH, kC);
}
void backward_weight(GroupedProblem<bf16>& p) {
  grouped_matmul_bf16_backward_weight(p.dfc.data(), p.dh.data(), p.x.data(), p.offset.data(),
                                      kExperts, kC, kH);
  grouped_matmul_bf16_backward_weight(p.dproj.data(), p.dc.data(), p.act.data(), p.offset.data(),
                                      kExperts, kH, kC);
}

// FLOP/s of forward, backward_input and backward_weight, one thread.
template <typename T>
std::array<double, 3> grouped_rates(T one, double seconds) {
  GroupedProblem<T> p(one);
  const double flops = 2 * 2.0 * kRows * kC * kH, s = seconds / 3;
  return {flops / best_time_cold(s, [&] { forward(p); }),
          flops / best_time_cold(s, [&] { backward_input(p); }),
          flops / best_time_cold(s, [&] { backward_weight(p); })};
}

}  // namespace

void measure_grouped_gemm(HardwareProfile& h, const ProbeRun& run) {
  const std::array<double, 3> r = grouped_rates(1.0f, run.seconds);
  h.grouped_fwd_flops = r[0], h.grouped_bwd_flops = r[1], h.grouped_wgt_flops = r[2];
}

void measure_grouped_gemm_bf16(HardwareProfile& h, const ProbeRun& run) {
  const std::array<double, 3> r = grouped_rates(bf16(0x3F80), run.seconds);  // 1.0
  h.grouped_fwd_flops_bf16 = r[0], h.grouped_bwd_flops_bf16 = r[1], h.grouped_wgt_flops_bf16 = r[2];
}

}  // namespace mt::plan
