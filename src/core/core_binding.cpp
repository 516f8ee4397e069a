#include "core/core_binding.h"

#include <pthread.h>
#include <sched.h>

#include "core/error.h"

namespace mt {

const char* core_binding_name(CoreBinding b) {
  switch (b) {
    case CoreBinding::cores:
      return "cores";
    case CoreBinding::none:
      return "none";
    case CoreBinding::spread:
      return "spread";
    case CoreBinding::automatic:
      break;
  }
  return "auto";
}

namespace {

// Round robin over the allowed cores, wrapping when ranks x threads exceed them (a thread
// that would get a core twice keeps one entry). 2 cores, tp 2 x pp 2: ranks 0 and 2 on one
// core, 1 and 3 on the other, so each stage's tp pair runs side by side.
std::vector<std::vector<int>> spread_binding(const std::vector<int>& allowed, int ranks,
                                             int threads) {
  if (allowed.empty() || ranks < 1 || threads < 1) return {};
  const long n = long(allowed.size());
  std::vector<std::vector<int>> plan(ranks);
  for (int r = 0; r < ranks; ++r)
    for (int t = 0; t < threads && t < n; ++t)
      plan[r].push_back(allowed[(long(r) * threads + t) % n]);
  return plan;
}

}  // namespace

std::vector<std::vector<int>> plan_core_binding(const std::vector<int>& allowed, int ranks,
                                                int threads, CoreBinding mode) {
  const long need = long(ranks) * long(threads);
  const bool fits = ranks >= 1 && threads >= 1 && need <= long(allowed.size());
  if (mode == CoreBinding::cores)
    MT_REQUIRE(fits, "--bind cores needs a core per compute thread: ", ranks, " ranks x ", threads,
               " threads = ", need, " cores, but this process may use ", allowed.size(),
               " (see taskset -p / the cgroup's cpuset); use --bind auto or none");
  if (mode == CoreBinding::spread) return spread_binding(allowed, ranks, threads);
  const bool bind =
      mode == CoreBinding::cores || (mode == CoreBinding::automatic && fits && ranks > 1);
  if (!bind) return {};
  std::vector<std::vector<int>> plan(ranks);
  for (int r = 0; r < ranks; ++r)
    plan[r].assign(allowed.begin() + long(r) * threads, allowed.begin() + long(r + 1) * threads);
  return plan;
}

std::vector<int> allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

bool bind_calling_thread(const std::vector<int>& cores) {
  if (cores.empty()) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

void name_calling_thread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace mt
