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
    case CoreBinding::automatic:
      break;
  }
  return "auto";
}

std::vector<std::vector<int>> plan_core_binding(const std::vector<int>& allowed, int ranks,
                                                int threads, CoreBinding mode) {
  const long need = long(ranks) * long(threads);
  const bool fits = ranks >= 1 && threads >= 1 && need <= long(allowed.size());
  if (mode == CoreBinding::cores)
    MT_REQUIRE(fits, "--bind cores needs a core per compute thread: ", ranks, " ranks x ", threads,
               " threads = ", need, " cores, but this process may use ", allowed.size(),
               " (see taskset -p / the cgroup's cpuset); use --bind auto or none");
  const bool bind = mode == CoreBinding::cores || (mode == CoreBinding::automatic && ranks > 1);
  if (!bind || allowed.empty() || ranks < 1 || threads < 1) return {};
  // Round robin; where the threads fit, rank r's are entries r * threads .. + threads - 1.
  const long n = long(allowed.size());
  std::vector<std::vector<int>> plan(ranks);
  for (int r = 0; r < ranks; ++r)
    for (long t = 0; t < threads && t < n; ++t)
      plan[r].push_back(allowed[(long(r) * threads + t) % n]);
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
