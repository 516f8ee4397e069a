#include "comm/bench_under_compute.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <iomanip>
#include <ostream>
#include <vector>

#include "comm/world.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"

namespace mt {

namespace {

// Voluntary context switches of the whole process so far: every sleep of a rank or of a
// progress thread is one, whatever the machine's load (the time figures are not).
int64_t voluntary_switches() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_nvcsw;
}

struct Medians {
  double with_us, without_us, gemm_us;
  double with_switches, without_switches;  // voluntary, per iteration, all ranks
  bool ok;
};

// Both variants in every repeat, so drift of the machine's speed hits both alike.
Medians measure(Communicator& c, const UnderComputeOptions& o, const std::function<void()>& g) {
  std::vector<float> x(o.count);
  bool ok = true;
  auto iteration = [&](bool with_comm) {
    g();
    Work w;
    if (with_comm) {
      std::fill(x.begin(), x.end(), 1.f);
      w = c.all_reduce(x.data(), x.data(), x.size(), DType::f32, ReduceOp::sum);
    }
    g();
    w.wait();
    if (with_comm && x[0] != float(c.size())) ok = false;
  };
  int64_t switches[2] = {0, 0};
  auto timed = [&](bool with_comm) {
    c.barrier().wait();
    const int64_t s0 = voluntary_switches();
    Stopwatch sw;
    for (int i = 0; i < o.iters; ++i) iteration(with_comm);
    int64_t ns = int64_t(sw.elapsed() / o.iters * 1e9);
    if (c.rank() == 0) switches[with_comm] += voluntary_switches() - s0;
    c.all_reduce(&ns, &ns, 1, DType::i64, ReduceOp::max).wait();  // the slowest rank's
    return ns * 1e-3;
  };
  for (int i = 0; i < 3; ++i) iteration(true);
  std::vector<double> with, without, gemm;
  for (int r = 0; r < o.repeats; ++r) {
    with.push_back(timed(true));
    without.push_back(timed(false));
  }
  for (int i = 0; i < 9; ++i) {
    Stopwatch sw;
    g();
    gemm.push_back(sw.elapsed() * 1e6);
  }
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  int32_t good = ok ? 1 : 0;
  c.all_reduce(&good, &good, 1, DType::i32, ReduceOp::min).wait();
  const double calls = double(o.repeats) * o.iters;
  return {median(with),        median(without),     median(gemm),
          switches[1] / calls, switches[0] / calls, good == 1};
}

}  // namespace

int run_under_compute_bench(const UnderComputeOptions& o, const ComputeWork& work,
                            std::ostream& out) {
  MT_REQUIRE(o.ranks >= 1 && o.ranks <= kMaxLocalRanks, "--ranks must be in 1..", kMaxLocalRanks,
             " on the local backend (got ", o.ranks, ")");
  MT_REQUIRE(o.gemm_us >= 1 && o.gemm_us <= 1e6, "--gemm-us must be in 1..1000000");
  MT_REQUIRE(o.count >= 1 && o.count <= (size_t(1) << 26), "--count must be in 1..67108864");
  MT_REQUIRE(o.iters >= 1 && o.repeats >= 1, "--iters and --repeats must be at least 1");
  WorldOptions wopts;
  wopts.timeout_s = o.timeout_s;
  std::atomic<bool> all_ok{true};
  run_local(o.ranks, wopts, [&](CommWorld& w) {
    set_compute_threads(1);
    auto c = w.world();
    // Every rank runs the same work: rank 0's size, so no rank waits for a bigger one.
    int32_t k = w.rank() == 0 ? work.size(o.gemm_us) : 0;
    c->broadcast(&k, 1, DType::i32, 0).wait();
    const ComputeWork::Instance g = work.make(k);
    const Medians m = measure(*c, o, g.run);
    if (!m.ok) all_ok = false;
    if (w.rank() != 0) return;
    out << "# meshtrain bench comm --under-compute: local backend, " << c->size()
        << " ranks, 1 thread each; iteration = " << g.what << "; all_reduce(" << o.count
        << " float32) issued; GEMM; wait\n"
        << "# medians of " << o.repeats << " repeats x " << o.iters
        << " iterations, both variants in every repeat (slowest rank)\n"
        << std::fixed << std::setprecision(1) << "gemm_us " << m.gemm_us << "\n"
        << "iteration_without_us " << m.without_us << "\n"
        << "iteration_with_us " << m.with_us << "\n"
        << "added_us " << m.with_us - m.without_us << "\n"
        << std::setprecision(2) << "voluntary_switches_per_iteration_without " << m.without_switches
        << "\n"
        << "voluntary_switches_per_iteration_with " << m.with_switches << "\n"
        << "check " << (m.ok ? "ok" : "WRONG") << "\n";
  });
  return all_ok ? 0 : 1;
}

}  // namespace mt
