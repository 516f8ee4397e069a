// The size of one unit's parameters (a chunk's edge unit or one block: ChunkHooks in
// model_chunk.h), the figures a data-parallel engine and the memory estimate lay out.
#pragma once

#include <cstddef>

#include "model/param_table.h"

namespace mt {

struct UnitSize {
  size_t floats =
      0;  // in the arenas: each tensor rounded up to 16 floats, as the table lays them out
  size_t real = 0;         // elements (no alignment), the experts' included
  size_t expert_real = 0;  // elements of expert tensors (is_expert_param)
};

// The unit of the table's entries from position `first` on.
UnitSize unit_size_since(const ParamTable& table, size_t first);

}  // namespace mt
