// Test driver for the hybrid world, run under mpirun by tests/comm_mpi_hybrid.cmake:
//   comm_hybrid_driver K suite [--quick]  every op on the world and on groups of each kind
//                                         (inside a process, one member per process,
//                                         several members per process), two at once
//   comm_hybrid_driver K fault            the last rank throws mid-run (exit 1 naming it)
//   comm_hybrid_driver K timeout          rank 1 skips a collective (exit 1, bounded)
//   comm_hybrid_driver K usage-all        UsageError on every rank (exit 2, printed once)
// K is --ranks-per-process; the number of processes is mpirun's -np.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "collective_checks.h"
#include "comm/hybrid/hierarchical_communicator.h"
#include "comm/hybrid/run_hybrid.h"
#include "comm/local/local_communicator.h"
#include "comm/world.h"
#include "core/error.h"

namespace mt {
namespace {

using namespace comm_checks;

bool hierarchical(const Communicator& c) {
  return dynamic_cast<const hybrid::HierarchicalCommunicator*>(&c) != nullptr;
}

bool in_one_process(const Communicator& c) {
  return dynamic_cast<const local::LocalCommunicator*>(&c) != nullptr;
}

void suite_on(Communicator& c, bool quick) {
  run_suite(c, quick, /*exact_stats=*/!hierarchical(c), /*in_place_a2a=*/!in_one_process(c));
  check_pipelined(c);
}

// Runs the suite on two groups at once, from two threads of each rank: neither may block
// the other.
void both(Communicator& a, Communicator& b, bool quick) {
  std::exception_ptr failed_b, failed_a;
  std::thread other([&] {
    try {
      suite_on(b, quick);
    } catch (...) {
      failed_b = std::current_exception();
    }
  });
  try {
    suite_on(a, quick);
  } catch (...) {
    failed_a = std::current_exception();  // join first: a joinable thread terminates
  }
  other.join();
  if (failed_a) std::rethrow_exception(failed_a);
  if (failed_b) std::rethrow_exception(failed_b);
}

void suite(CommWorld& w, int k, bool quick) {
  MT_CHECK(std::string(w.backend_name()) == "hybrid", w.backend_name());
  const int r = w.rank(), n = w.size(), slot = r % k;
  auto world = w.world();
  MT_CHECK(world->size() == n && world->global_rank(world->rank()) == r, world->name());
  MT_CHECK(hierarchical(*world) == (k > 1), world->name(), " hierarchical ", hierarchical(*world));
  suite_on(*world, quick);

  // by_process: the ranks of one process (local backend); by_slot: one rank of each process
  // (plain MPI); mixed: slots 0..k-2 of every process (hierarchical for k >= 3) and the
  // last slot (plain MPI).
  std::vector<int> by_process, by_slot, mixed;
  for (int q = 0; q < n; ++q) {
    if (q / k == r / k) by_process.push_back(q);
    if (q % k == slot) by_slot.push_back(q);
    if ((q % k == k - 1) == (slot == k - 1)) mixed.push_back(q);
  }
  auto local = w.make_group(by_process, "tp");
  auto across = w.make_group(by_slot, "dp");
  auto mix = w.make_group(mixed, "ep");
  MT_CHECK(in_one_process(*local) && !hierarchical(*across) && !in_one_process(*across),
           local->name(), " ", across->name());
  MT_CHECK(hierarchical(*mix) == (k >= 3 && slot != k - 1), mix->name());
  both(*local, *across, true);
  suite_on(*mix, true);
  world->barrier().wait();
  if (r == 0)
    std::printf("comm_hybrid_driver: suite passed on %d ranks, %d per process (%s, %s, %s, %s)\n",
                n, k, world->name().c_str(), local->name().c_str(), across->name().c_str(),
                mix->name().c_str());
}

void fault(CommWorld& w) {
  auto world = w.world();
  std::vector<float> buf(1000, 1.0f);
  for (int step = 0; step < 5; ++step) {
    if (step == 3 && w.rank() == w.size() - 1) throw RuntimeError("injected failure at step 3");
    world->all_reduce(std::span<float>(buf), ReduceOp::sum).wait();
  }
}

void timeout(CommWorld& w) {
  std::vector<float> buf(10, 1.0f);
  if (w.rank() != 1) w.world()->all_reduce(std::span<float>(buf), ReduceOp::sum).wait();
}

// Every rank thread of every process aborts at the same moment (after a barrier): Open MPI's
// MPI_Abort returns to all callers but the first in a process, and the job ended with SIGABRT
// (exit 134) where two ranks of one process timed out together. It must end with code 1.
void abort_together(CommWorld& w) {
  w.world()->barrier().wait();
  w.abort("aborted together with the other ranks");
}

}  // namespace
}  // namespace mt

int main(int argc, char** argv) {
  const int k = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::string mode = argc > 2 ? argv[2] : "suite";
  const bool quick = argc > 3 && std::strcmp(argv[3], "--quick") == 0;
  mt::WorldOptions opts;
  // The suite's largest calls take seconds on a loaded machine. A failing rank ends the job
  // through MPI_Abort whatever the timeout, so only the timeout mode has a short one, and
  // even that leaves a busy machine room to set the world up (group creation waits with the
  // same timeout).
  opts.timeout_s = mode == "timeout" ? 10 : 120;
  mt::run_hybrid(&argc, &argv, k, opts, [&](mt::CommWorld& w) {
    if (mode == "suite")
      mt::suite(w, k, quick);
    else if (mode == "fault")
      mt::fault(w);
    else if (mode == "timeout")
      mt::timeout(w);
    else if (mode == "abort-together")
      mt::abort_together(w);
    else if (mode == "usage-all")
      throw mt::UsageError("bad value for --dp: 3 does not divide 4");
    else
      throw mt::UsageError("unknown mode " + mode);
  });
  return 0;
}
