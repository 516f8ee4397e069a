// What one small all-reduce costs two rank threads of the local backend, by where the
// scheduler lets them run and by what they do between collectives: the mechanism behind
// the calibration's idle latency (44-73 us per step at stops 36-38 and 41, 0.5 us at 39).
//
//   bench_collective_placement [--iters N] [--rows R] [--quick]
//
// Placements: "bound" (a core each, as `meshtrain train` binds ranks that fit: --bind auto),
// "unbound" (the OS places them, as the calibration's probe did before stop 42) and
// "stacked" (both pinned to the first allowed core while the backend still believes it has
// two cores, so its waiters spin: what the unbound probe hits whenever the scheduler stacks
// the pair). Loads: "idle" (a barrier, then the all-reduce: the calibration's ping-pong) and
// "busy" (an R x 128 x 256 sgemm, the reference model's tp2 attention projection, then the
// all-reduce, as a tp region of a step) and "late" (a barrier, then rank 1 sleeps 300 us
// before it arrives: rank 0 spends its spin budget, yields and sleeps on the group's
// condition variable, so its return pays a wake-up). Per collective, the median over iterations of
// the time from the later rank's arrival to the later rank's return: what the collective adds to a
// step beyond the ranks' own imbalance. The share of iterations where both ranks ran on one core
// says which placement the unbound pair got. The spin budget (comm/local/ doorbell.h's 2000 pauses)
// is printed in thread CPU time, so it reads the same under load. The machine is shared: read the
// figures as a diagnosis, never as a pass or fail.
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/world.h"
#include "core/core_binding.h"
#include "core/timer.h"
#include "kernels/matmul.h"

namespace mt {
namespace {

enum class Placement { bound, unbound, stacked };
const char* placement_name(Placement p) {
  return p == Placement::bound ? "bound" : p == Placement::unbound ? "unbound" : "stacked";
}

struct Options {
  int iters = 400, rows = 1024;
};

struct Result {
  double exposed_us;  // median of later arrival -> later return
  double same_core;   // share of iterations whose two arrivals ran on one core
};

// Both ranks' arrival and return times and cores, per iteration (steady_clock is one clock
// for every thread of the process).
struct Trace {
  std::vector<double> arrive[2], leave[2];
  std::vector<int> core[2];
};

void pin_to_first_allowed_core() {
  const std::vector<int> allowed = allowed_cores();
  if (!allowed.empty()) bind_calling_thread({allowed.front()});
}

enum class Load { idle, busy, late };
const char* load_name(Load l) {
  return l == Load::idle ? "idle" : l == Load::busy ? "busy" : "late";
}

Result run(Placement placement, Load load, const Options& o) {
  const bool busy = load == Load::busy;
  WorldOptions wo;
  wo.bind = placement == Placement::bound ? CoreBinding::cores : CoreBinding::none;
  Trace t;
  run_local(2, wo, [&](CommWorld& w) {
    omp_set_num_threads(1);
    if (placement == Placement::stacked) pin_to_first_allowed_core();
    auto comm = w.world();
    const int me = comm->rank();
    const int rows = busy ? o.rows : 1, k = 128, n = 256;
    std::vector<float> a(size_t(rows) * k, 0.1f), b(size_t(n) * k, 0.1f), c(size_t(rows) * n);
    float x = 1;
    comm->barrier().wait();
    for (int i = 0; i < o.iters; ++i) {
      if (busy)
        matmul_forward(c.data(), a.data(), b.data(), nullptr, rows, k, n);
      else
        comm->barrier().wait();
      if (load == Load::late && me == 1)
        std::this_thread::sleep_for(std::chrono::microseconds(300));
      t.core[me].push_back(sched_getcpu());
      t.arrive[me].push_back(now_seconds());
      comm->all_reduce(&x, &x, 1, DType::f32, ReduceOp::sum).wait();
      t.leave[me].push_back(now_seconds());
    }
  });
  std::vector<double> exposed;
  int same = 0;
  for (int i = 3; i < o.iters; ++i) {  // the first ones include the threads' start
    exposed.push_back(std::max(t.leave[0][i], t.leave[1][i]) -
                      std::max(t.arrive[0][i], t.arrive[1][i]));
    same += t.core[0][i] == t.core[1][i];
  }
  std::sort(exposed.begin(), exposed.end());
  return {exposed[exposed.size() / 2] * 1e6, double(same) / double(exposed.size())};
}

// Thread CPU time of the doorbell's spin phase: 2000 pauses (comm/local/doorbell.h).
double spin_budget_us() {
  const double c0 = thread_cpu_seconds();
  for (int rep = 0; rep < 100; ++rep)
    for (int i = 0; i < 2000; ++i) _mm_pause();
  return (thread_cpu_seconds() - c0) / 100 * 1e6;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      o.iters = 20, o.rows = 64;
    } else if ((a == "--iters" || a == "--rows") && i + 1 < argc) {
      const int v = std::atoi(argv[++i]);
      if (v < 8 || v > 1000000) {
        std::fprintf(stderr, "bench_collective_placement: error: %s must be 8..1000000\n",
                     a.c_str());
        std::exit(2);
      }
      (a == "--iters" ? o.iters : o.rows) = v;
    } else {
      std::fprintf(stderr, "usage: bench_collective_placement [--iters N] [--rows R] [--quick]\n");
      std::exit(2);
    }
  }
  return o;
}

}  // namespace
}  // namespace mt

int main(int argc, char** argv) {
  using namespace mt;
  const Options o = parse(argc, argv);
  if (allowed_cores().size() < 2) {
    std::printf("one core: two ranks share it whatever the placement; nothing to compare\n");
    return 0;
  }
  std::printf("# spin budget (2000 pauses, thread CPU time): %.1f us\n", spin_budget_us());
  std::printf("# placement  load  exposed_us  same_core\n");
  for (Load l : {Load::idle, Load::busy, Load::late})
    for (Placement p : {Placement::bound, Placement::unbound, Placement::stacked}) {
      const Result r = run(p, l, o);
      std::printf("%-10s  %-4s  %10.2f  %9.2f\n", placement_name(p), load_name(l), r.exposed_us,
                  r.same_core);
    }
  return 0;
}
