#include "core/threads.h"

#include "core/error.h"

#include <omp.h>

#include <vector>

namespace mt {

void require_thread_count(const char* flag, int n) {
  MT_REQUIRE(n >= 1 && n <= kMaxComputeThreads, flag, " must be in 1..", kMaxComputeThreads,
             " (got ", n, ")");
}

std::string thread_start_failure(const std::string& what, const std::system_error& e) {
  return str(what, ": a thread could not be started (", e.what(),
             "): the process or user limit on threads (ulimit -u) is lower than the run needs; "
             "run fewer ranks or --threads, or raise the limit");
}

void throw_thread_start_failure(const std::string& what, const std::system_error& e) {
  throw RuntimeError(thread_start_failure(what, e));
}

namespace {

// Starts and joins n - 1 threads at once (the helpers an OpenMP team of n needs).
void probe_thread_start(int n) {
  std::vector<std::thread> probes;
  std::string failure;
  for (int i = 1; i < n && failure.empty(); ++i) {
    try {
      probes.emplace_back([] {});
    } catch (const std::system_error& e) {
      failure = thread_start_failure(str("--threads ", n), e);
    }
  }
  for (std::thread& t : probes) t.join();
  if (!failure.empty()) throw RuntimeError(failure);
}

}  // namespace

void set_compute_threads(int n) {
  if (n > 1) probe_thread_start(n);
  omp_set_dynamic(0);
  omp_set_max_active_levels(1);
  omp_set_num_threads(n < 1 ? 1 : n);
}

int compute_threads() {
  return omp_get_max_threads();
}

}  // namespace mt
