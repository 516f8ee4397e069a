// Spin-then-yield-then-block waiting on shared-memory state.
//
// Ranks of the local backend are threads, often more of them than cores (8 ranks on 2
// cores in CI). A waiter therefore spins only when every rank can own a core (policy
// set per job), then yields so a peer that still has to arrive can run, and finally
// sleeps on a condition variable. Whoever changes the state calls ring(), which costs one
// atomic load unless somebody sleeps.
//
// No lost wake-ups: the sleeper registers (sleepers_++, seq_cst) and re-checks the state
// under mu_; the ringer publishes its state (seq_cst) before reading sleepers_ and takes
// mu_ before notifying. The sleep is also sliced so check() (failure, deadline) runs at
// least every kSlice.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace mt::local {

struct WaitPolicy {
  int spin_polls = 0;    // busy polls before yielding (0 when ranks outnumber cores)
  int yield_polls = 64;  // polls with a yield between them before sleeping
};

// Spinning only pays when every rank has a core; otherwise it steals the core of the rank
// being waited for. cores: those the process may use (its affinity set, which taskset or
// a cgroup may make smaller than the machine). The progress threads mostly sleep, so
// count ranks.
inline WaitPolicy wait_policy_for(int ranks, int cores) {
  const bool own_cores = ranks <= cores;
  // 2000 polls: ~55 us at the Zen 5 guest's 26 ns pause (~40 us at the Intel host's 21 ns).
  return WaitPolicy{own_cores ? 2000 : 0, own_cores ? 100 : 32};
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

class Doorbell {
 public:
  void ring() {
    if (sleepers_.load() > 0) {
      std::lock_guard lock(mu_);
      cv_.notify_all();
    }
  }

  // Returns once ready() is true. check() may throw (failure, timeout); it runs before
  // every sleep, so a waiter notices a failure within one slice. It runs under mu_, so it
  // must not ring a doorbell itself.
  template <class Ready, class Check>
  void wait(const WaitPolicy& p, Ready&& ready, Check&& check) {
    for (int i = 0; i < p.spin_polls; ++i) {
      if (ready()) return;
      cpu_relax();
    }
    for (int i = 0; i < p.yield_polls; ++i) {
      if (ready()) return;
      std::this_thread::yield();
    }
    std::unique_lock lock(mu_);
    sleepers_.fetch_add(1);
    struct Leave {
      std::atomic<int>& n;
      ~Leave() { n.fetch_sub(1); }
    } leave{sleepers_};
    while (!ready()) {
      check();
      cv_.wait_for(lock, kSlice);
    }
  }

 private:
  static constexpr std::chrono::milliseconds kSlice{20};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

}  // namespace mt::local
