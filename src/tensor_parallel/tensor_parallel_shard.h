// Which slice of the tensor-parallel group a layer is: the rank's position, the group's
// size and communicator, and whether sequence parallelism is on.
#pragma once

#include "comm/communicator.h"

namespace mt {

struct TensorParallelShard {
  int rank = 0, size = 1;
  Communicator* comm = nullptr;    // null when size == 1
  bool sequence_parallel = false;  // only meaningful with size > 1

  // Sequence parallelism in effect: activations outside the parallel region hold this
  // rank's N/size of the N token rows.
  bool splits_sequence() const { return size > 1 && sequence_parallel; }
};

}  // namespace mt
