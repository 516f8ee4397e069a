// Debug mode (MESHTRAIN_CHECK_COLLECTIVES=1): before each collective, the ranks of the
// group exchange what they are about to call, on a communicator of its own, and every
// rank compares. A mismatch (one rank in all_reduce, another in broadcast; different
// counts, types or roots) becomes an error naming both calls instead of a hang or, worse,
// a silently wrong result. Costs one small all-gather per collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/mpi/mpi_group.h"

namespace mt {

enum class CollectiveKind : int64_t {
  all_reduce = 1,
  reduce_scatter,
  all_gather,
  broadcast,
  all_to_all_v,
  barrier
};

struct CollectiveCall {
  CollectiveKind kind;
  int64_t count = 0;  // per the op's own convention; -1 where it differs per rank (a2a)
  int64_t dtype = -1;
  int64_t op = -1;    // ReduceOp or -1
  int64_t root = -1;  // broadcast root or -1
};

// "all_reduce(count 1000, f32, sum)", as the local backend writes it
std::string describe(const CollectiveCall& call);

// Throws RuntimeError on the first rank whose call differs from this rank's.
void check_collective(const std::shared_ptr<MpiGroup>& group, const CollectiveCall& call,
                      uint64_t seq);

// all_to_all_v: what each peer will send this rank must equal what this rank expects.
void check_all_to_all_counts(const std::shared_ptr<MpiGroup>& group, const size_t* send_counts,
                             const size_t* recv_counts, uint64_t seq);

}  // namespace mt
