// What one block-and-wake of a rank thread costs when the rank threads outnumber the cores
// (calibration_probes.h). With more ranks than cores the local backend's waiter does not
// spin (comm/local/doorbell.h wait_policy_for): it yields 32 times, then sleeps on its
// doorbell until the peer's send rings it. While the other rank of its core has work, the
// yields hand that rank the core and the waiter rarely sleeps; it sleeps when nothing else
// wants its core: a pipeline stage's ranks while the other stage computes alone, a tp
// partner late in such a stretch (stop 45's brute force: the planner's first choice, tp 2 x
// pp 2 in one microbatch, slept 15 times per rank and step; the dp 2 x tp 2 finalist 3).
// Its wake-up is then the kernel's wake of a sleeping thread on an idle (virtual) core.
//
// The probe: 2 x cores rank threads placed two per core as a step's (run_paired_ranks).
// Rank 0 receives from rank 1 (another core); rank 1 computes ~1 ms, then sends. The other
// ranks wait at a barrier (as a stage in the bubble), or, for the comparison, compute
// throughout. Per wait: rank 0's return less rank 1's send (one clock), kept where rank 0
// slept (its voluntary context switches grew): the profile keeps the median of the waits
// with the others waiting; the log gives both cases' median, p90 and share of waits that
// slept, and the load average (a loaded host's other processes take the woken core).
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ostream>
#include <vector>

#include "comm/world.h"
#include "core/timer.h"
#include "kernels/matmul.h"
#include "plan/calibration_probes.h"

namespace mt::plan {

namespace {

long voluntary_switches() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

// A small GEMM (~40 us on one core here): the work of rank 1 before its send, and of the
// ranks that keep the cores busy.
struct Gemm {
  static constexpr int kRows = 128, kIn = 256, kOut = 128;
  std::vector<float> a = std::vector<float>(size_t(kRows) * kIn, 0.1f);
  std::vector<float> w = std::vector<float>(size_t(kOut) * kIn, 0.1f);
  std::vector<float> out = std::vector<float>(size_t(kRows) * kOut);
  void operator()() { matmul_forward(out.data(), a.data(), w.data(), nullptr, kRows, kIn, kOut); }
};

// The wake delays (seconds) of `waits` waits where rank 0 slept, and the share that slept.
struct WakeSamples {
  std::vector<double> delays;
  double slept_share = 0;
};

WakeSamples sample_wakes(int ranks, int waits, int work_gemms, bool others_busy) {
  std::vector<double> sent(size_t(waits), 0), returned(size_t(waits), 0);
  std::vector<char> slept(size_t(waits), 0);
  std::atomic<bool> stop{false};
  run_paired_ranks(ranks, [&](CommWorld& w) {
    omp_set_num_threads(1);
    auto comm = w.world();
    Gemm gemm;
    float token = 0;
    comm->barrier().wait();
    if (comm->rank() == 0) {
      for (int i = 0; i < waits; ++i) {
        const long before = voluntary_switches();
        comm->recv(&token, 1, DType::f32, 1, 7).wait();
        returned[size_t(i)] = now_seconds();
        slept[size_t(i)] = voluntary_switches() > before;
      }
      stop.store(true);
    } else if (comm->rank() == 1) {
      for (int i = 0; i < waits; ++i) {
        for (int g = 0; g < work_gemms; ++g) gemm();
        sent[size_t(i)] = now_seconds();  // published to rank 0 by the send itself
        comm->send(&token, 1, DType::f32, 0, 7).wait();
      }
    } else if (others_busy) {
      while (!stop.load(std::memory_order_relaxed)) gemm();
    }
    comm->barrier().wait();
  });
  WakeSamples s;
  for (int i = 0; i < waits; ++i)
    if (slept[size_t(i)]) s.delays.push_back(std::max(0.0, returned[size_t(i)] - sent[size_t(i)]));
  s.slept_share = waits > 0 ? double(s.delays.size()) / waits : 0;
  return s;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

}  // namespace

WakeCost wake_cost(int cores, double seconds, bool others_busy) {
  // Rank 1's work before each send: 25 GEMMs (~1 ms), far beyond rank 0's 32 yields, so
  // that rank 0 sleeps; the waits as many as the share of the budget allows.
  constexpr int kWorkGemms = 25;
  const int waits = std::clamp(int(seconds / 2e-3), 20, 400);
  const WakeSamples s = sample_wakes(2 * std::max(cores, 1), waits, kWorkGemms, others_busy);
  return {quantile(s.delays, 0.5), quantile(s.delays, 0.9), s.slept_share, int(s.delays.size())};
}

void measure_oversubscribed_wake(HardwareProfile& h, const ProbeRun& run) {
  const int cores = h.cores > 0 ? h.cores : 1;
  const WakeCost idle = wake_cost(cores, 0.7 * run.seconds, false);
  const WakeCost busy = wake_cost(cores, 0.3 * run.seconds, true);
  double load[1] = {-1};
  getloadavg(load, 1);
  char line[320];
  std::snprintf(line, sizeof line,
                "wake of a sleeping rank, %d ranks on %d cores, the others waiting: median "
                "%.1f us, p90 %.1f us (%.0f%% of waits slept); the others computing: median "
                "%.1f us, p90 %.1f us (%.0f%% slept); load average %.2f\n",
                2 * cores, cores, idle.median_s * 1e6, idle.p90_s * 1e6, 100 * idle.slept_share,
                busy.median_s * 1e6, busy.p90_s * 1e6, 100 * busy.slept_share, load[0]);
  run.log << line;
  h.oversubscribed_wake_s = idle.median_s;
}

}  // namespace mt::plan
