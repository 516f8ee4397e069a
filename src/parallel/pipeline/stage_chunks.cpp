#include "parallel/pipeline/stage_chunks.h"

#include "core/error.h"
#include "parallel/pipeline/stage_partition.h"

namespace mt {

std::vector<ChunkSpec> stage_chunk_specs(const std::vector<int>& layers_per_chunk, int stages,
                                         int stage, ChunkPlacement placement) {
  const int K = int(layers_per_chunk.size());
  MT_CHECK(stages >= 1 && K % stages == 0 && stage >= 0 && stage < stages, "stage ", stage, " of ",
           stages, " with ", K, " model chunks");
  MT_CHECK(placement != ChunkPlacement::v_shape || K == 2 * stages,
           "a V places 2 chunks per stage (", K, " model chunks for ", stages, " stages)");
  Schedule geometry;  // only its placement of model chunks on stages
  geometry.stages = stages;
  geometry.chunks = K / stages;
  geometry.placement = placement;
  const std::vector<int> off = chunk_layer_offsets(layers_per_chunk);
  std::vector<ChunkSpec> specs;
  for (int c = 0; c < geometry.chunks; ++c) {
    const int k = geometry.model_chunk(stage, c);
    specs.push_back({off[k], off[k + 1], k == 0, k == K - 1});
  }
  return specs;
}

}  // namespace mt
