// Which cores each rank thread of the local backend runs on (--bind).
//
// The scheduler places rank threads as it likes. On two cores it was seen stacking both dp
// ranks on one core for a whole run while the other core served other work (14 of 15
// samples of /proc/<pid>/task/*/stat; dp 2 at 0.76x of dp 1): a rank's wake-up is placed
// near its waker, and once the other core is busy the load balancer sees nothing to move.
// Binding each rank's compute threads to cores of its own, as mpirun --bind-to core and
// NCCL's launchers do, keeps ranks off each other's core. The progress threads of the
// local backend stay free to run on any core (they run while their rank computes, so
// they belong on a core whose rank waits).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mt {

enum class CoreBinding {
  automatic,  // bind when ranks x threads fit the cores this process may use, else not
  cores,      // bind; refused (UsageError) when they do not fit
  none,       // the operating system places every thread
  spread,     // bind even when ranks share cores: round robin, consecutive ranks apart
};

inline std::vector<std::pair<std::string, CoreBinding>> core_binding_names() {
  return {{"auto", CoreBinding::automatic},
          {"cores", CoreBinding::cores},
          {"none", CoreBinding::none},
          {"spread", CoreBinding::spread}};
}
const char* core_binding_name(CoreBinding b);

// The cores of each rank (rank r: entry r), or no entries when nothing is bound. Rank r
// gets `threads` consecutive entries of `allowed` (the cores this process may use, as
// sched_getaffinity lists them), so that a rank's OpenMP team stays together and no two
// ranks share a core. CoreBinding::spread binds when they do not fit too: thread t of rank
// r gets core (r * threads + t) mod allowed, so consecutive ranks (a tp pair, whose
// collectives need both running at once) sit on different cores while the ranks that share
// a core are the ones furthest apart in rank order. A single rank is bound only when asked
// (CoreBinding::cores): alone, it has no peer to collide with, and a pin would keep it on a core
// another program occupies. Throws UsageError for CoreBinding::cores when ranks x threads exceed
// allowed.
std::vector<std::vector<int>> plan_core_binding(const std::vector<int>& allowed, int ranks,
                                                int threads, CoreBinding mode);

// The cores the calling thread may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cores();

// Restricts the calling thread to `cores` (threads it starts later, such as its OpenMP
// team, inherit the set). False when the system refuses (a core went offline, a cgroup
// changed); the thread then keeps its placement.
bool bind_calling_thread(const std::vector<int>& cores);

// The calling thread's name as `top` and /proc/<pid>/task/*/comm show it (at most 15
// characters), so scheduler samples can tell rank threads from progress threads.
void name_calling_thread(const std::string& name);

}  // namespace mt
