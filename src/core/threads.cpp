#include "core/threads.h"

#include "core/error.h"

#include <omp.h>

namespace mt {

void require_thread_count(const char* flag, int n) {
  MT_REQUIRE(n >= 1 && n <= kMaxComputeThreads, flag, " must be in 1..", kMaxComputeThreads,
             " (got ", n, ")");
}

void set_compute_threads(int n) {
  omp_set_dynamic(0);
  omp_set_max_active_levels(1);
  omp_set_num_threads(n < 1 ? 1 : n);
}

int compute_threads() {
  return omp_get_max_threads();
}

}  // namespace mt
