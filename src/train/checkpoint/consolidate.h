// `meshtrain export --from CHECKPOINT_DIR --to FILE.safetensors`: the weights of a sharded
// checkpoint as the single nanoGPT-named file (weights_file.h) that moves to PyTorch, built
// offline from the shards, tensor by tensor through the manifest.
#pragma once

#include <cstdint>
#include <string>

namespace mt {

struct ConsolidateReport {
  int step = 0;
  int64_t tensors = 0;
  uint64_t bytes_verified = 0;
};

// Verifies the whole checkpoint first (verify_sharded_checkpoint), refuses an output that
// is a file of the checkpoint, then writes `out` atomically. UsageError for bad input.
ConsolidateReport export_sharded_checkpoint(const std::string& dir, const std::string& out);

}  // namespace mt
