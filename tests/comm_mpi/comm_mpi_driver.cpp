// Test driver for the MPI backend, run under mpirun by tests/comm_mpi.cmake:
//   comm_mpi_driver suite [--quick]  every op on world and on sub-groups used concurrently
//   comm_mpi_driver fault            rank 1 throws mid-run (expect exit 1 naming rank 1)
//   comm_mpi_driver mismatch         ranks call different collectives (run with
//                                    MESHTRAIN_CHECK_COLLECTIVES=1: expect a report)
//   comm_mpi_driver mismatch-a2a     all_to_all_v counts that disagree (same env)
//   comm_mpi_driver timeout          rank 1 skips a collective (expect a timeout, exit 1)
//   comm_mpi_driver usage-all|usage-one   UsageError on every rank / on rank 1 (exit 2)
//   comm_mpi_driver background       an all-to-all-v completes while its ranks make no MPI
//                                    call (comm/mpi/background_progress.h)
// A wrong result throws a RuntimeError describing it, so the run exits 1 with that line.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collective_checks.h"
#include "comm/mpi/mpi_world.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/timer.h"

namespace mt {
namespace {

using namespace comm_checks;

// dp = ranks with the same parity, tp = consecutive pairs (as a 2-D mesh with tp=2).
void suite(CommWorld& w, bool quick) {
  // One host: mpirun's local rank is the world rank.
  auto& mw = dynamic_cast<MpiWorld&>(w);
  MT_CHECK(mw.local_rank() == w.rank() && mw.local_size() == w.size(), "local rank ",
           mw.local_rank(), " of ", mw.local_size(), " on world rank ", w.rank());
  MT_CHECK(std::string(w.backend_name()) == "mpi", w.backend_name());
  auto world = w.world();
  run_suite(*world, quick);
  check_pipelined(*world);
  const int r = w.rank(), n = w.size();
  std::vector<int> dp, tp;
  for (int q = 0; q < n; ++q) {
    if (q % 2 == r % 2) dp.push_back(q);
    if (q / 2 == r / 2) tp.push_back(q);
  }
  auto dp_comm = w.make_group(dp, "dp");
  auto tp_comm = w.make_group(tp, "tp");
  MT_CHECK(dp_comm->size() == int(dp.size()) && dp_comm->global_rank(dp_comm->rank()) == r,
           dp_comm->name());
  // Both groups at once, from two threads: neither may block the other.
  std::exception_ptr failed;
  std::thread other([&] {
    try {
      run_suite(*tp_comm, quick);
    } catch (...) {
      failed = std::current_exception();
    }
  });
  std::exception_ptr failed_here;
  try {
    run_suite(*dp_comm, quick);
  } catch (...) {
    failed_here = std::current_exception();  // join first: a joinable thread terminates
  }
  other.join();
  if (failed_here) std::rethrow_exception(failed_here);
  if (failed) std::rethrow_exception(failed);
  if (r == 0)
    std::printf("comm_mpi_driver: suite passed on %d ranks (%s, %s, ...)\n", n,
                dp_comm->name().c_str(), tp_comm->name().c_str());
}

void fault(CommWorld& w) {
  auto world = w.world();
  std::vector<float> buf(1000, 1.0f);
  for (int step = 0; step < 5; ++step) {
    if (step == 3 && w.rank() == 1) throw RuntimeError("injected failure at step 3");
    world->all_reduce(std::span<float>(buf), ReduceOp::sum).wait();
  }
}

void mismatch(CommWorld& w) {
  MT_CHECK(w.options().check_collectives, "run with MESHTRAIN_CHECK_COLLECTIVES=1");
  auto world = w.world();
  std::vector<float> buf(1000, 1.0f);
  world->all_reduce(std::span<float>(buf), ReduceOp::sum).wait();  // agreed: passes
  if (w.rank() == 1)
    world->broadcast(buf.data(), 999, DType::f32, 0).wait();
  else
    world->all_reduce(std::span<float>(buf), ReduceOp::sum).wait();
}

// Agreeing ops, but rank 0 expects one element fewer from rank 1 than rank 1 sends.
void mismatch_a2a(CommWorld& w) {
  MT_CHECK(w.options().check_collectives, "run with MESHTRAIN_CHECK_COLLECTIVES=1");
  auto world = w.world();
  const int n = world->size();
  std::vector<size_t> sc(n, 4), rc(n, 4);
  if (w.rank() == 0) rc[1] = 3;
  std::vector<int32_t> send(4 * n), recv(4 * n);
  world->all_to_all_v(send.data(), sc.data(), recv.data(), rc.data(), DType::i32).wait();
}

// Rows large enough for Open MPI's rendezvous (far above the eager limit of shared memory
// and TCP), so they move only when something progresses MPI. The ranks make no MPI call
// until the progress thread has seen the exchange complete, as the experts' GEMMs do not;
// without that thread it never completes, and the rank fails after 20 s.
void background(CommWorld& w) {
  auto& mw = dynamic_cast<MpiWorld&>(w);
  auto world = w.world();
  const size_t n = size_t(w.size()), rows = size_t(4) << 20;  // 16 MiB to each peer
  std::vector<size_t> counts(n, rows);
  std::vector<float> send(n * rows), recv(n * rows, -1.0f);
  for (size_t g = 0; g < n; ++g)
    for (size_t i = 0; i < rows; ++i)
      send[g * rows + i] = float(w.rank() * 1000 + int(g)) + float(i % 7);
  world->barrier().wait();
  const uint64_t before = mw.progress().completed();
  Work a2a =
      world->all_to_all_v(send.data(), counts.data(), recv.data(), counts.data(), DType::f32);
  Stopwatch watch;
  while (mw.progress().completed() == before) {
    MT_CHECK(watch.elapsed() < 20, "rank ", w.rank(),
             ": the all_to_all_v did not complete in 20 s without an MPI call from the rank");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  a2a.wait();
  for (size_t g = 0; g < n; ++g)
    for (size_t i = 0; i < rows; ++i)
      MT_CHECK(recv[g * rows + i] == float(int(g) * 1000 + w.rank()) + float(i % 7), "rank ",
               w.rank(), ": row ", i, " from rank ", g, " is ", recv[g * rows + i]);
  if (w.rank() == 0)
    std::printf("comm_mpi_driver: the all-to-all completed in the background in %.3f s\n",
                watch.elapsed());
}

void timeout(CommWorld& w) {
  std::vector<float> buf(10, 1.0f);
  if (w.rank() != 1) w.world()->all_reduce(std::span<float>(buf), ReduceOp::sum).wait();
}

}  // namespace
}  // namespace mt

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "suite";
  const bool quick = argc > 2 && std::strcmp(argv[2], "--quick") == 0;
  mt::WorldOptions opts;
  opts.timeout_s = mode == "suite" ? 60 : 4;
  mt::run_mpi(&argc, &argv, opts, [&](mt::CommWorld& w) {
    if (mode == "suite")
      mt::suite(w, quick);
    else if (mode == "fault")
      mt::fault(w);
    else if (mode == "mismatch")
      mt::mismatch(w);
    else if (mode == "mismatch-a2a")
      mt::mismatch_a2a(w);
    else if (mode == "timeout")
      mt::timeout(w);
    else if (mode == "background")
      mt::background(w);
    else if (mode == "usage-all")
      throw mt::UsageError("bad value for --dp: 3 does not divide 4");
    else if (mode == "usage-one") {
      if (w.rank() == 1) throw mt::UsageError("rank-local bad input");
      std::vector<float> buf(10, 1.0f);
      w.world()->all_reduce(std::span<float>(buf), mt::ReduceOp::sum).wait();
    } else
      throw mt::UsageError("unknown mode " + mode);
  });
  return 0;
}
