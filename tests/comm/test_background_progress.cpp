// comm/mpi/background_progress.h: the MPI backend's progress thread polls the Works handed
// to it until each completes or is dropped, sleeping a quantum between rounds, and blocks
// (no polls, no CPU) with nothing outstanding. Counted on fake Works; the one CPU bound is
// generous (a poller that spun would take the whole interval). Under MPI:
// comm_mpi_background_progress (tests/comm_mpi.cmake).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "comm/mpi/background_progress.h"
#include "core/timer.h"

namespace mt {
namespace {

// Completes at the n-th test() (never when n < 0); counts the tests.
struct CountedWork final : Work::Impl {
  explicit CountedWork(int n) : complete_at(n) {}
  bool test() override {
    const int k = ++tests;
    return complete_at >= 0 && k >= complete_at;
  }
  void wait() override {}
  const int complete_at;
  std::atomic<int> tests{0};
};

// Waits (real time, generously bounded) until pred holds.
template <class Pred>
bool eventually(Pred pred, double seconds = 10) {
  Stopwatch watch;
  while (!pred()) {
    if (watch.elapsed() > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

TEST(BackgroundProgress, PollsAWatchedWorkUntilItCompletesThenNoMore) {
  BackgroundProgress progress;
  auto w = std::make_shared<CountedWork>(5);
  progress.watch(w);
  ASSERT_TRUE(eventually([&] { return progress.completed() == 1; }));
  EXPECT_EQ(w->tests.load(), 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(w->tests.load(), 5) << "polled after it completed";
}

TEST(BackgroundProgress, ADroppedWorkIsNotKeptAliveNorPolled) {
  BackgroundProgress progress;
  auto w = std::make_shared<CountedWork>(-1);
  std::weak_ptr<CountedWork> weak = w;
  progress.watch(w);
  ASSERT_TRUE(eventually([&] { return w->tests.load() >= 2; }));
  w.reset();  // the thread may hold it for the rest of a round, not longer
  EXPECT_TRUE(eventually([&] { return weak.expired(); }));
  const uint64_t rounds = progress.rounds();
  ASSERT_TRUE(eventually([&] { return progress.rounds() > rounds; }));
  // The round after the drop emptied the list: the thread now blocks.
  const uint64_t idle = progress.rounds();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_LE(progress.rounds(), idle + 1);
  EXPECT_EQ(progress.completed(), 0u);
}

// The brief's check that the thread does not spin: over 300 ms with a Work outstanding
// that never completes, the process (this thread sleeps) uses a small part of one core,
// and the thread does at most one round per quantum. Spinning (a zero quantum) takes the
// whole 300 ms.
TEST(BackgroundProgress, AnOutstandingWorkCostsLittleCpu) {
  BackgroundProgress progress;
  auto w = std::make_shared<CountedWork>(-1);
  const double cpu0 = process_cpu_seconds();
  Stopwatch watch;
  progress.watch(w);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double wall = watch.elapsed(), cpu = process_cpu_seconds() - cpu0;
  EXPECT_LT(cpu, 0.25 * wall) << "the progress thread used " << cpu << " s of CPU in " << wall
                              << " s";
  EXPECT_GE(progress.rounds(), 10u);  // it does poll
  EXPECT_LE(double(progress.rounds()), wall / 100e-6 + 1);
}

// With nothing outstanding the thread does not poll at all.
TEST(BackgroundProgress, IdleMeansNoRounds) {
  BackgroundProgress progress;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(progress.rounds(), 0u);
}

}  // namespace
}  // namespace mt
