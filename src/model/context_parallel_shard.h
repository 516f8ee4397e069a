// Which slice of the context-parallel group a model chunk is: the rank's position, the
// group's size and communicator, and how attention crosses it (docs/context_parallel.md).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace mt {

enum class CpComm {
  ring,      // K/V blocks passed around the ring, dK/dV passed back with them
  allgather  // K/V all-gathered once per layer, dK/dV reduce-scattered
};

// The names --cp-comm takes.
inline std::vector<std::pair<std::string, CpComm>> cp_comm_names() {
  return {{"ring", CpComm::ring}, {"allgather", CpComm::allgather}};
}

inline const char* cp_comm_name(CpComm c) {
  return c == CpComm::allgather ? "allgather" : "ring";
}

struct ContextParallelShard {
  int rank = 0, size = 1;
  Communicator* comm = nullptr;  // null when size == 1
  CpComm mode = CpComm::ring;

  bool splits_sequence() const { return size > 1; }
};

}  // namespace mt
