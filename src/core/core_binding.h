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
  automatic,  // bind 2 ranks or more: a core each where they fit, round robin where not
  cores,      // bind; refused (UsageError) when they do not fit
  none,       // the operating system places every thread
};

inline std::vector<std::pair<std::string, CoreBinding>> core_binding_names() {
  return {
      {"auto", CoreBinding::automatic}, {"cores", CoreBinding::cores}, {"none", CoreBinding::none}};
}
const char* core_binding_name(CoreBinding b);

// The cores of each rank (rank r: entry r), or no entries when nothing is bound. Rank r
// gets `threads` consecutive entries of `allowed` (the cores this process may use, as
// sched_getaffinity lists them), so that a rank's OpenMP team stays together and no two
// ranks share a core. Where ranks x threads exceed `allowed`, automatic wraps round robin:
// thread t of rank r on entry (r * threads + t) mod allowed, so that consecutive ranks (a
// tp pair, whose collectives need both running at once) sit on different cores and the
// ranks sharing a core are those furthest apart in rank order. Unbound, the scheduler was
// seen stacking a stage's tp pair on one core (stop 47: 16% of a tp 2 x pp 2 step on 2
// quiet cores, 26-35% at load 10); round robin ran that layout 9% faster and dp 2 x pp 2
// 7% faster on the quiet host (docs/communication.md). A single rank is bound only when asked
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
