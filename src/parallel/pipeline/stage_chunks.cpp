#include "parallel/pipeline/stage_chunks.h"

#include "core/error.h"
#include "parallel/pipeline/stage_partition.h"

namespace mt {

std::vector<ChunkSpec> stage_chunk_specs(const std::vector<int>& layers_per_chunk, int stages,
                                         int stage) {
  const int K = int(layers_per_chunk.size());
  MT_CHECK(stages >= 1 && K % stages == 0 && stage >= 0 && stage < stages, "stage ", stage, " of ",
           stages, " with ", K, " model chunks");
  const std::vector<int> off = chunk_layer_offsets(layers_per_chunk);
  std::vector<ChunkSpec> specs;
  for (int k = stage; k < K; k += stages) specs.push_back({off[k], off[k + 1], k == 0, k == K - 1});
  return specs;
}

}  // namespace mt
