// The communication probes of --calibrate (calibration_probes.h): the local backend between
// rank threads (idle and among computing ranks), and the MPI backend between two processes.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "comm/world.h"
#include "core/core_binding.h"
#include "core/error.h"
#include "core/timer.h"
#include "kernels/matmul.h"
#include "plan/calibration_probes.h"
#include "plan/calibration_timing.h"
#include "train/options.h"

namespace mt::plan {

WorldOptions step_placement() {
  WorldOptions o;
  o.bind = EngineOptions{}.bind;
  return o;
}

void run_paired_ranks(int ranks, const RankMain& fn) {
  const std::vector<int> cores = allowed_cores();
  run_local(ranks, step_placement(), [&](CommWorld& w) {
    // Before the rank's first OpenMP region, so that its team (one thread here) inherits it.
    if (!cores.empty()) bind_calling_thread({cores[size_t(w.rank()) % cores.size()]});
    fn(w);
  });
}

namespace {

// Median time of `iters` all-reduces of `count` floats (or send/recv pairs when p2p)
// between two rank threads of the local backend.
double comm_time(size_t count, int iters, bool p2p, int ranks = 2) {
  std::vector<double> per_rank(size_t(ranks), 0);
  run_local(ranks, step_placement(), [&](CommWorld& w) {
    auto comm = w.world();
    std::vector<float> buf(std::max<size_t>(count, 1), 1.0f);
    std::vector<double> times;
    for (int i = 0; i < iters + 2; ++i) {
      comm->barrier().wait();
      const double t0 = now_seconds();
      if (p2p) {
        if (comm->rank() == 0)
          comm->send(buf.data(), count, DType::f32, 1, 7).wait();
        else
          comm->recv(buf.data(), count, DType::f32, 0, 7).wait();
      } else {
        comm->all_reduce(buf.data(), buf.data(), count, DType::f32, ReduceOp::sum).wait();
      }
      if (i >= 2) times.push_back(now_seconds() - t0);
    }
    std::sort(times.begin(), times.end());
    per_rank[size_t(comm->rank())] = times[times.size() / 2];
  });
  return *std::max_element(per_rank.begin(), per_rank.end());
}

// A loop of rank threads that compute between collectives: each iteration a (rows, k) x
// (k, n) sgemm on one thread, then (count > 0) an all-reduce of `count` floats. The first
// `warmup` iterations are not timed (page faults, cold caches, the threads' first
// placement: stop 42's first run of a process read 74 us where the next read 0-15).
struct BusyLoop {
  int rows, k, n, iters, warmup;
};
// About the work a tp layer of the reference model does between two of its collectives
// when 2 x cores ranks share the cores.
constexpr BusyLoop kOversubscribedLoop{128, 256, 384, 150, 20};
// Wall seconds per timed iteration of `loop` among `ranks` rank threads, two per core
// (run_paired_ranks), from the barrier after the warm-up to the barrier after the last
// iteration (thread start and teardown left out); the better of two runs.
double busy_loop_seconds(int ranks, size_t count, const BusyLoop& loop = kOversubscribedLoop) {
  double best = 0;
  for (int rep = 0; rep < 2; ++rep) {
    double t0 = 0, t1 = 0;
    run_paired_ranks(ranks, [&](CommWorld& w) {
      omp_set_num_threads(1);
      auto comm = w.world();
      std::vector<float> a(size_t(loop.rows) * loop.k, 0.1f), b(size_t(loop.n) * loop.k, 0.1f);
      std::vector<float> c(size_t(loop.rows) * loop.n);
      std::vector<float> x(std::max<size_t>(count, 1), 1.0f);
      auto iterate = [&](int iters) {
        for (int i = 0; i < iters; ++i) {
          matmul_forward(c.data(), a.data(), b.data(), nullptr, loop.rows, loop.k, loop.n);
          if (count > 0)
            comm->all_reduce(x.data(), x.data(), count, DType::f32, ReduceOp::sum).wait();
        }
      };
      iterate(loop.warmup);
      comm->barrier().wait();
      if (comm->rank() == 0) t0 = now_seconds();
      iterate(loop.iters);
      comm->barrier().wait();
      if (comm->rank() == 0) t1 = now_seconds();
    });
    const double t = (t1 - t0) / loop.iters;
    best = rep == 0 ? t : std::min(best, t);
  }
  return best;
}

// The reference model's (4L d256 T128, micro-batch 8) attention output projection under
// tp 2: 1024 rows, the rank's 128 of the 256 inputs, all 256 outputs, whose output the engine
// all-reduces right after it (tensor_parallel/row_parallel_linear.cpp).
constexpr BusyLoop kTpLoop{1024, 128, 256, 100, 3};

// A one-float all-reduce after each GEMM of `loop` between two rank threads placed as a
// step's (step_placement): what it adds beyond the ranks' imbalance
// (exposed_collective_seconds), the situation of a tp region's collective in a step. An idle
// ping-pong between bound ranks reads about the same (0.4-1.3 us against 1.2-2.3 us at load
// 12 here, bench_collective_placement); this one is what the step does.
double tp_collective_exposed_seconds(const BusyLoop& loop = kTpLoop) {
  std::vector<std::vector<double>> arrive(2), leave(2);
  run_local(2, step_placement(), [&](CommWorld& w) {
    omp_set_num_threads(1);
    auto comm = w.world();
    const size_t me = size_t(comm->rank());
    std::vector<float> a(size_t(loop.rows) * loop.k, 0.1f), b(size_t(loop.n) * loop.k, 0.1f);
    std::vector<float> c(size_t(loop.rows) * loop.n);
    float x = 1;
    comm->barrier().wait();
    for (int i = 0; i < loop.iters; ++i) {
      matmul_forward(c.data(), a.data(), b.data(), nullptr, loop.rows, loop.k, loop.n);
      arrive[me].push_back(now_seconds());
      comm->all_reduce(&x, &x, 1, DType::f32, ReduceOp::sum).wait();
      leave[me].push_back(now_seconds());
    }
  });
  // The first calls include the threads' start and cold caches.
  for (size_t r = 0; r < 2; ++r) {
    arrive[r].erase(arrive[r].begin(), arrive[r].begin() + loop.warmup);
    leave[r].erase(leave[r].begin(), leave[r].begin() + loop.warmup);
  }
  return exposed_collective_seconds(arrive, leave);
}

// What one all-reduce of `count` floats adds to that loop: the loop with it less the loop
// without. With more rank threads than cores the waiter that blocks waits for a peer that
// is queued behind a computing rank; an idle ping-pong (comm_time) does not see that, and
// read 7-46 us per step in calibrations here where the busy loop pays ~200 us per
// all-reduce. The reduction itself is work of the ranks that share the cores: its added
// wall, not its idle time, is what a step pays.
double busy_collective_seconds(int ranks, size_t count, double without,
                               const BusyLoop& loop = kOversubscribedLoop) {
  return std::max(0.0, busy_loop_seconds(ranks, count, loop) - without);
}

// About what one launch of two processes by mpirun costs on this guest (1.1 s measured, at
// load 11): the first MPI probe is started only where its share holds that.
constexpr double kMpiLaunchS = 1.0;

// busbw (bytes/s) and time (s) of one size of `meshtrain bench comm --backend mpi` on two
// processes of this machine, started by mpirun; {0, 0} when that does not work here (no
// mpirun, no permission, or it hangs past 60 s): the profile then has no MPI figures.
std::pair<double, double> mpi_bench(const std::string& op, size_t bytes) {
  const std::string exe = own_executable();
  if (exe.empty()) return {0, 0};
  const std::string cmd =
      str("timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 '", exe,
          "' bench comm --backend mpi --op ", op, " --min-bytes ", bytes, " --max-bytes ", bytes,
          " 2>/dev/null");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return {0, 0};
  double size = 0, count = 0, us = 0, algbw = 0, busbw = 0;
  char line[1024];
  bool found = false;
  while (std::fgets(line, sizeof line, pipe))
    if (line[0] != '#' &&
        std::sscanf(line, "%lf %lf %lf %lf %lf", &size, &count, &us, &algbw, &busbw) == 5)
      found = true;
  if (pclose(pipe) != 0 || !found) return {0, 0};
  return {busbw * 1e9, us * 1e-6};
}

}  // namespace

double exposed_collective_seconds(const std::vector<std::vector<double>>& arrive,
                                  const std::vector<std::vector<double>>& leave) {
  MT_REQUIRE(!arrive.empty() && arrive.size() == leave.size(), "one trace per rank");
  const size_t calls = arrive[0].size();
  std::vector<double> exposed;
  for (size_t i = 0; i < calls; ++i) {
    double last_arrival = arrive[0][i], last_return = leave[0][i];
    for (size_t r = 1; r < arrive.size(); ++r) {
      last_arrival = std::max(last_arrival, arrive[r][i]);
      last_return = std::max(last_return, leave[r][i]);
    }
    exposed.push_back(std::max(0.0, last_return - last_arrival));
  }
  if (exposed.empty()) return 0;
  std::sort(exposed.begin(), exposed.end());
  return exposed[exposed.size() / 2];
}

// Two rank threads placed as a step places them (step_placement): busbw of a 16 MiB
// all-reduce (2(n-1)/n = 1 for two ranks), a 16 MiB send, and the latency of a one-float
// all-reduce between ranks that compute a tp2 GEMM between collectives, per step (2 log2 n
// = 2 steps); a local profile's links are the same within and across its one "node".
void measure_local_links(HardwareProfile& h, const ProbeRun& run) {
  const size_t big = size_t(4) << 20;
  const int iters = std::max(3, int(run.seconds));
  h.intra_busbw = 4.0 * double(big) / comm_time(big, iters, false);
  h.intra_latency_s = tp_collective_exposed_seconds() / 2;
  h.p2p_bw_intra = 4.0 * double(big) / comm_time(big, iters, true);
  h.inter_busbw = h.intra_busbw;
  h.inter_latency_s = h.intra_latency_s;
  h.p2p_bw_inter = h.p2p_bw_intra;
}

double oversubscribed_busbw_from(double bytes, double seconds, int ranks, double idle_busbw) {
  if (seconds <= 0 || ranks <= 1) return 0;  // the bytes added nothing measurable
  const double busbw = 2.0 * (ranks - 1) / ranks * bytes / seconds;
  // Ranks that share the cores cannot move bytes faster than idle ones: a figure above the
  // idle busbw (measure_local_links, run before) is the loops' noise, bounded there.
  return idle_busbw > 0 ? std::min(busbw, idle_busbw) : busbw;
}

// More rank threads than cores: the local backend's waiters yield and then block
// (comm/local/doorbell.h), so a collective waits for its peers to be scheduled behind the
// ranks that compute: what a one-float all-reduce adds to busy ranks, 2 x cores of them,
// per step of the all-reduce (2 log2 ranks). The ranks sit two per core
// (run_paired_ranks): unbound, each run fell into a paired state (each core one early and
// one late rank; 0-4 us) or a stuck one (the early ranks yield to each other and sleep while
// the late ones queue on the other core; 17-48 us), and the calibration read whichever mix
// of the two it drew; a quiet step is paired (docs/planner.md, stop 43). Then the same with a
// tp-sized payload (one 128-token microbatch of a d256 model, 128 KiB): what its bytes add beyond
// the one float, as a bus bandwidth (2 (n-1)/n x bytes / seconds), among ranks that share the cores
// (the members reduce their chunks in turn, a chunk's reader waits for its writer's slice): the
// wall a step pays per byte, the sharing included (0 when the bytes add nothing measurable).
void measure_oversubscribed_latency(HardwareProfile& h, const ProbeRun&) {
  const int ranks = 2 * h.cores;
  const size_t payload = 128 * 256;
  const double without = busy_loop_seconds(ranks, 0);
  const double one = busy_collective_seconds(ranks, 1, without);
  h.oversubscribed_latency_s = one / (2 * std::ceil(std::log2(double(ranks))));
  h.oversubscribed_busbw = oversubscribed_busbw_from(
      double(payload) * 4, busy_collective_seconds(ranks, payload, without) - one, ranks,
      h.intra_busbw);
}

// Two processes: 16 MiB all-reduce busbw, a 4-byte all-reduce's time as its latency (2
// steps), a 16 MiB broadcast (one send between two ranks) as p2p.
// Three mpirun launches, each started while the probe's share of the budget holds the last
// one's wall (the first: kMpiLaunchS).
void measure_mpi_links(HardwareProfile& h, const ProbeRun& run) {
  ChildBudget budget(run.seconds);
  auto bench = [&](const char* op, size_t bytes) {
    if (!budget.allows(budget.last_run_s() > 0 ? budget.last_run_s() : kMpiLaunchS))
      return std::pair<double, double>{0, 0};
    return budget.time([&] { return mpi_bench(op, bytes); });
  };
  const double busbw = bench("all_reduce", size_t(16) << 20).first;
  const double small_s = bench("all_reduce", 4).second;
  const double p2p = bench("broadcast", size_t(16) << 20).first;
  if (busbw > 0 && p2p > 0 && small_s > 0) {
    h.mpi_busbw = busbw;
    h.mpi_latency_s = small_s / 2;
    h.mpi_p2p_bw = p2p;
  } else {
    run.log << "MPI backend not measured (mpirun did not run 'meshtrain bench comm' here, or "
            << "its launches did not fit this round's " << run.seconds
            << " s share of --calibrate-seconds)\n";
  }
}

}  // namespace mt::plan
