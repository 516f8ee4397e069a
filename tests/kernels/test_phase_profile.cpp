// The step breakdown's phase scopes (kernels/phase_profile.h): a kernel records only when
// its thread profiles, and a kernel called by another is charged to the caller's phase.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/phase_profile.h"

namespace mt {
namespace {

TEST(PhaseProfile, RecordsOnlyWhileAttached) {
  std::vector<float> a(64, 1.f), b(64, 1.f), c(64);
  PhaseTotals totals;
  sgemm(false, false, 8, 8, 8, 1.f, a.data(), 8, b.data(), 8, 0.f, c.data(), 8);
  EXPECT_EQ(totals.calls[int(Phase::gemm)], 0u);
  attach_phase_totals(&totals);
  sgemm(false, false, 8, 8, 8, 1.f, a.data(), 8, b.data(), 8, 0.f, c.data(), 8);
  attach_phase_totals(nullptr);
  sgemm(false, false, 8, 8, 8, 1.f, a.data(), 8, b.data(), 8, 0.f, c.data(), 8);
  EXPECT_EQ(totals.calls[int(Phase::gemm)], 1u);
  EXPECT_EQ(totals.flops[int(Phase::gemm)], 2.0 * 8 * 8 * 8);
  EXPECT_GE(totals.seconds[int(Phase::gemm)], 0.0);
}

TEST(PhaseProfile, NestedKernelsAreChargedToTheOutermostPhase) {
  std::vector<float> inp(4 * 8, 0.5f), w(8 * 8, 0.25f), out(4 * 8), mean(4), rstd(4);
  PhaseTotals totals;
  attach_phase_totals(&totals);
  {
    PhaseScope attention(Phase::attention, 10, 20);
    matmul_forward(out.data(), inp.data(), w.data(), nullptr, 4, 8, 8);  // sgemm inside
  }
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), w.data(), 4, 8);
  attach_phase_totals(nullptr);
  EXPECT_EQ(totals.calls[int(Phase::attention)], 1u);
  EXPECT_EQ(totals.calls[int(Phase::gemm)], 0u);
  EXPECT_EQ(totals.flops[int(Phase::attention)], 10.0);
  EXPECT_EQ(totals.calls[int(Phase::norm)], 1u);
  EXPECT_EQ(totals.bytes[int(Phase::norm)], 8.0 * 4 * 8);
}

// The cpu column of the breakdown: a phase's CPU time counts the thread's work, not the
// time it waits (here asleep, as a rank on a loaded machine waits for a core), and never
// exceeds the phase's wall time.
TEST(PhaseProfile, CpuTimeCountsWorkNotWaiting) {
  PhaseTotals totals;
  attach_phase_totals(&totals);
  {
    PhaseScope waiting(Phase::norm, 0, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  {
    PhaseScope working(Phase::activation, 0, 0);
    volatile double sink = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
    while (std::chrono::steady_clock::now() < end) sink = sink + 1.0;
  }
  attach_phase_totals(nullptr);
  const int norm = int(Phase::norm), act = int(Phase::activation);
  EXPECT_GE(totals.seconds[norm], 0.030);
  EXPECT_LT(totals.cpu_seconds[norm], 0.010);  // asleep: almost no CPU
  EXPECT_GT(totals.cpu_seconds[act], 0.0);     // busy: CPU, at most its wall time
  EXPECT_LE(totals.cpu_seconds[act], totals.seconds[act]);
  EXPECT_GE(totals.seconds[act], 0.030);
}

}  // namespace
}  // namespace mt
