// Compute threads per rank. Ranks of the local backend are std::threads of one process;
// OpenMP keeps its thread-count setting per calling thread, so each rank sets its own.
#pragma once

#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace mt {

// The message of a thread the system would not start (a process limit, ulimit -u), naming
// what it was for: one line instead of std::terminate's SIGABRT or libgomp's exit.
std::string thread_start_failure(const std::string& what, const std::system_error& e);
[[noreturn]] void throw_thread_start_failure(const std::string& what, const std::system_error& e);

// std::thread(f), with a refusal thrown as RuntimeError(thread_start_failure(what, ...)).
template <class F>
std::thread start_thread(const std::string& what, F&& f) {
  try {
    return std::thread(std::forward<F>(f));
  } catch (const std::system_error& e) {
    throw_thread_start_failure(what, e);
  }
}

// One range for every command's --threads: at least one, and no more than a machine
// could plausibly run (a typo like 100000 would otherwise spawn threads until it crashes).
constexpr int kMaxComputeThreads = 256;
// Throws UsageError "FLAG must be in 1..256 (got N)".
void require_thread_count(const char* flag, int n);

// Sets the number of OpenMP threads the calling thread (one rank) uses for its kernels. The
// n - 1 helper threads are started once first, so that a process limit below them is a
// RuntimeError here rather than libgomp's "Thread creation failed" and exit mid-run.
void set_compute_threads(int n);
int compute_threads();

}  // namespace mt
