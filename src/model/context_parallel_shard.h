// Which slice of the context-parallel group a model chunk is: the rank's position, the
// group's size and communicator, and how attention crosses it (docs/context_parallel.md).
#pragma once

#include "comm/communicator.h"

namespace mt {

enum class CpComm {
  ring,      // K/V blocks passed around the ring, dK/dV passed back with them
  allgather  // K/V all-gathered once per layer, dK/dV reduce-scattered
};

struct ContextParallelShard {
  int rank = 0, size = 1;
  Communicator* comm = nullptr;  // null when size == 1
  CpComm mode = CpComm::ring;

  bool splits_sequence() const { return size > 1; }
};

}  // namespace mt
