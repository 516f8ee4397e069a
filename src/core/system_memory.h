// How much memory this process can still get, for refusing a run up front.
#pragma once

#include <cstdint>

namespace mt {

// MemAvailable of /proc/meminfo (what the kernel can hand out without swapping), lowered to
// what the cgroup v2 limits allow (memory.max - memory.current of this process's cgroup and
// its ancestors) when one is tighter: in a container MemAvailable describes the host, and
// exceeding the cgroup's limit ends the run by the OOM killer, without a message.
// Bytes; -1 when nothing is known (not Linux, /proc not mounted).
int64_t available_memory_bytes();

}  // namespace mt
