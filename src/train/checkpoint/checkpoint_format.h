// --checkpoint-format (docs/checkpoints.md): how --save writes a checkpoint.
//   global   one directory, gathered to and written by rank 0.
//   sharded  every rank writes what it owns into --save DIR/step_NNNNNN, with a manifest.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mt {

enum class CheckpointFormat { global, sharded };

// The names --checkpoint-format takes.
inline std::vector<std::pair<std::string, CheckpointFormat>> checkpoint_format_names() {
  return {{"global", CheckpointFormat::global}, {"sharded", CheckpointFormat::sharded}};
}

}  // namespace mt
