// A hierarchical group's all-to-all-v (hierarchical_communicator.h), run on its worker:
// every member exchanges its rows with every other member directly, point to point, and
// not through the process's other members.
//
// Why not in two levels, as the group's reductions: an all-to-all's bytes do not shrink
// when a process's members pool them, and pooling (the counts' all-gather and an
// all-to-all inside the process before one all-to-all between processes) makes every
// member's rows wait until the last member of its process has issued the same call. Under
// --moe-overlap-parts that rendezvous came before every expert exchange, so skew between
// the two ranks of a process held the link idle (docs/moe.md, "Overlapped all-to-all").
// Here a member's rows to other processes leave at its own issue: its sends between
// processes are posted first, on the receiver slot's point-to-point communicator
// (slot_tag.h's kAllToAllTag), then its receives, then the exchange inside the process
// (the local backend's send/recv), and all are polled together with the worker's
// sleeping wait. The receives match in issue order (MPI and the local backend keep one
// channel's messages in order), so successive all-to-alls of the group never mix.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/communicator.h"
#include "comm/hybrid/hierarchical_communicator.h"
#include "comm/hybrid/sleeping_wait.h"

namespace mt::hybrid {

// send / recv as Communicator::all_to_all_v (counts per group rank, process-major);
// scratch holds a copy of the send rows where they overlap recv.
void direct_all_to_all_v(const HierarchicalParts& q, const void* send, const size_t* send_counts,
                         void* recv, const size_t* recv_counts, DType t, std::vector<char>& scratch,
                         const SleepingWait& pacing);

}  // namespace mt::hybrid
