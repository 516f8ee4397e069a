// The chunks one pipeline stage holds: local chunk c of stage s is model chunk
// Schedule::model_chunk(s, c) under the schedule's placement (schedule.h: c*p + s when
// interleaved; s and 2p-1-s in DualPipeV's V), holding blocks [offsets[k], offsets[k+1])
// (stage_partition.h); model chunk 0 adds the embedding, the last model chunk ln_f + head +
// loss. The result is what GPT(cfg, chunks, tp, max_b) takes, in local chunk order.
#pragma once

#include <vector>

#include "model/model_chunk.h"
#include "schedule/schedule.h"

namespace mt {

// layers_per_chunk: blocks of each model chunk (p * v entries), e.g. partition_layers().
std::vector<ChunkSpec> stage_chunk_specs(const std::vector<int>& layers_per_chunk, int stages,
                                         int stage,
                                         ChunkPlacement placement = ChunkPlacement::interleaved);

}  // namespace mt
