// Progress for the MPI backend's nonblocking calls while their rank computes.
//
// Open MPI moves a nonblocking collective's bytes only inside MPI calls: its TCP transport
// hands a large message over in a rendezvous (the receiver matches the sender's first
// fragment and answers; only then do the rest of the rows leave), and libnbc runs a
// collective's rounds from the progress engine. A Work the rank does not test while it
// computes therefore does not move, and the exchange the layer meant to hide happens in
// the rank's wait: with one rank per process (ep 2 across two hosts), --moe-overlap-parts
// made the expert all-to-all slower, not hidden (docs/moe.md, "Overlapped all-to-all").
//
// One thread per process polls the Works handed to it (Work::Impl::test(), which runs the
// MPI progress engine), with a sleep of one quantum between rounds, and only while some
// are outstanding: with nothing to watch it blocks on a condition variable and takes no
// CPU. A poll never blocks: MpiWork::test() only tries its lock, so a rank waiting on the
// same Work keeps it, and its own wait still enforces the group's timeout (a hung peer
// still ends the job in bounded time; this thread never fails anything). Completion runs
// where the poll sees it (MpiWork's on_complete: an avg's division, an in-place
// reduce-scatter's move), on this thread or the rank's, under the Work's lock.
// Nothing is watched in the hybrid world, whose communicator worker polls its own steps.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace mt {

class BackgroundProgress {
 public:
  explicit BackgroundProgress(std::chrono::microseconds quantum = std::chrono::microseconds(100));
  ~BackgroundProgress();  // stops polling and joins (before the world frees its communicators)
  BackgroundProgress(const BackgroundProgress&) = delete;
  BackgroundProgress& operator=(const BackgroundProgress&) = delete;

  // Polls w until it completes, fails or is dropped by its owner (weak: the thread never
  // keeps a Work alive).
  void watch(std::weak_ptr<Work::Impl> w);

  // For tests and traces: Works this thread saw complete, and its rounds of polls.
  uint64_t completed() const { return completed_.load(); }
  uint64_t rounds() const { return rounds_.load(); }

 private:
  void run();
  static bool poll(Work::Impl& w);  // true once w needs no more polls

  const std::chrono::microseconds quantum_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::weak_ptr<Work::Impl>> incoming_;  // watched since the last round
  bool stop_ = false;
  std::atomic<uint64_t> completed_{0}, rounds_{0};
  std::thread thread_;
};

}  // namespace mt
