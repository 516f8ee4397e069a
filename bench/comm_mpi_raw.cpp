// Baseline for the MPI backend: float32 sum all-reduce timed three ways in one run, so the
// ratio is fair on a noisy machine (the variants alternate within every repeat):
//   raw      MPI_Allreduce (Open MPI's tuned blocking algorithms)
//   raw_i    MPI_Iallreduce + MPI_Wait (the nonblocking path the backend uses)
//   backend  MpiCommunicator::all_reduce(...).wait()
// All in place, as gradient buckets are reduced. Time = median over repeats of the slowest
// rank; busbw = bytes / time * 2(n-1)/n (nccl-tests), in GB/s. ratio = raw time / backend
// time (1.0 = no overhead), from the medians and, as the estimate least hurt by other load
// on the machine, from the fastest repeats (ratio_best).
//
//   mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 bench_comm_mpi_raw
//       [--min-bytes 1048576] [--max-bytes 67108864] [--repeats 20]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/error.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Wall time of one call on the slowest rank, all ranks starting together.
template <typename F>
double time_once(MPI_Comm comm, F call) {
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  call();
  double t = MPI_Wtime() - t0, slowest = 0;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  size_t min_bytes = 1 << 20, max_bytes = 64 << 20;
  int repeats = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--min-bytes"))
      min_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--max-bytes"))
      max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::atoi(argv[i + 1]);
  }
  mt::run_mpi(&argc, &argv, mt::WorldOptions{}, [&](mt::CommWorld& w) {
    auto comm = w.world();
    MPI_Comm raw_comm;  // a communicator of its own, so the baselines share nothing with it
    MPI_Comm_dup(MPI_COMM_WORLD, &raw_comm);
    const int n = w.size();
    if (w.rank() == 0)
      std::printf(
          "# %d ranks, f32 sum, in place, median of %d (busbw in GB/s)\n"
          "%10s %9s %8s %9s %8s %10s %8s %6s %10s\n",
          n, repeats, "bytes", "raw_ms", "raw_bus", "raw_i_ms", "raw_i_bus", "backend_ms",
          "back_bus", "ratio", "ratio_best");
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
      const size_t count = bytes / sizeof(float);
      std::vector<float> buf(count, 1.0f);
      std::vector<double> raw, raw_i, backend;
      for (int rep = -2; rep < repeats; ++rep) {  // two warm-up rounds
        double a = time_once(raw_comm, [&] {
          MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(count), MPI_FLOAT, MPI_SUM, raw_comm);
        });
        double b = time_once(raw_comm, [&] {
          MPI_Request req;
          MPI_Iallreduce(MPI_IN_PLACE, buf.data(), int(count), MPI_FLOAT, MPI_SUM, raw_comm, &req);
          MPI_Wait(&req, MPI_STATUS_IGNORE);
        });
        double c = time_once(raw_comm, [&] {
          comm->all_reduce(buf.data(), buf.data(), count, mt::DType::f32, mt::ReduceOp::sum).wait();
        });
        if (rep < 0) continue;
        raw.push_back(a);
        raw_i.push_back(b);
        backend.push_back(c);
      }
      const double factor = 2.0 * (n - 1) / n / 1e9 * double(bytes);
      const double ta = median(raw), tb = median(raw_i), tc = median(backend);
      const double best = *std::min_element(raw.begin(), raw.end()) /
                          *std::min_element(backend.begin(), backend.end());
      if (w.rank() == 0)
        std::printf("%10zu %9.3f %8.2f %9.3f %8.2f %10.3f %8.2f %6.2f %10.2f\n", bytes, ta * 1e3,
                    factor / ta, tb * 1e3, factor / tb, tc * 1e3, factor / tc, ta / tc, best);
    }
    MPI_Comm_free(&raw_comm);
  });
  return 0;
}
